//! `tollgate top`: asks one or more instances' `GET /top` and merges them into a fleet view
//! (counts and errors add up, so the merged errors bound the merged counts as each instance's
//! bound its own), once or redrawn like top.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::admin::top_page::DEFAULT_N;
use crate::telemetry::top::{Heavy, K};

/// `tollgate top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// An instance's admin HTTP address; repeat for a fleet view of several.
    #[arg(
        long = "addr",
        env = "TOLLGATE_ADMIN_ADDR",
        default_value = "http://127.0.0.1:8080"
    )]
    pub addrs: Vec<String>,
    #[arg(long, env = "TOLLGATE_DOMAIN")]
    pub domain: String,
    /// Descriptors shown.
    #[arg(short = 'n', long = "count", default_value_t = DEFAULT_N)]
    pub count: usize,
    /// Print once and exit, instead of refreshing like top.
    #[arg(long)]
    pub once: bool,
    /// Time between refreshes.
    #[arg(long, default_value = "2s", value_parser = crate::base::duration::parse_positive)]
    pub interval: Duration,
    /// The admin bearer token's file (the server's --admin-token-file).
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

/// A merged count and how much it may overstate.
type Count = (u64, u64);

/// What one instance answered.
#[derive(serde::Deserialize)]
struct InstanceTop {
    instance: String,
    minute: Vec<Heavy>,
    hour: Vec<Heavy>,
    total_minute: u64,
    total_hour: u64,
}

/// Asks every instance and renders the merged table.
async fn fleet(args: &TopArgs, token: Option<&str>) -> anyhow::Result<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let n = args.count.clamp(1, K);
    let asks = args.addrs.iter().map(|addr| {
        let url = format!(
            "{}/top?domain={}&n={K}",
            crate::cli::counters::base(addr),
            crate::admin::counters::encode(&args.domain)
        );
        let mut req = client.get(url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = resp.text().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!("{status}: {}", body.trim()));
            }
            serde_json::from_str::<InstanceTop>(&body).map_err(|e| e.to_string())
        }
    });
    let answers = futures::future::join_all(asks).await;
    let mut minute: HashMap<String, Count> = HashMap::new();
    let mut hour: HashMap<String, Count> = HashMap::new();
    let (mut total_minute, mut total_hour) = (0, 0);
    let mut names = Vec::new();
    let mut failed = Vec::new();
    for (addr, answer) in args.addrs.iter().zip(answers) {
        match answer {
            Ok(t) => {
                for (into, from) in [(&mut minute, &t.minute), (&mut hour, &t.hour)] {
                    for h in from {
                        let e = into.entry(h.descriptor.clone()).or_default();
                        e.0 += h.over_limit;
                        e.1 += h.error;
                    }
                }
                total_minute += t.total_minute;
                total_hour += t.total_hour;
                names.push(t.instance);
            }
            Err(e) => failed.push(format!("{addr} ({e})")),
        }
    }
    if names.is_empty() {
        anyhow::bail!("no instance answered: {}", failed.join("; "));
    }
    let mut rows: Vec<(&String, Count, Count)> = hour
        .iter()
        .map(|(d, &hr)| (d, minute.get(d).copied().unwrap_or_default(), hr))
        .collect();
    rows.sort_by(|a, b| {
        b.1 .0
            .cmp(&a.1 .0)
            .then(b.2 .0.cmp(&a.2 .0))
            .then(a.0.cmp(b.0))
    });
    rows.truncate(n);
    let mut out = format!(
        "domain {}: {} OVER_LIMIT in the last minute, {} in the last hour; {} of {} instance(s) \
         answered ({})\n",
        crate::base::log_throttle::printable(&args.domain),
        total_minute,
        total_hour,
        names.len(),
        args.addrs.len(),
        names.join(", ")
    );
    for f in &failed {
        let _ = writeln!(out, "no answer from {f}");
    }
    let width = rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(10)
        .max(10);
    let _ = writeln!(
        out,
        "{:<width$}  {:>14}  {:>14}",
        "DESCRIPTOR", "LAST MINUTE", "LAST HOUR"
    );
    let cell = |(c, e): Count| {
        if e > 0 {
            format!("{c} ±{e}")
        } else {
            c.to_string()
        }
    };
    for (d, m, h) in rows {
        let _ = writeln!(out, "{d:<width$}  {:>14}  {:>14}", cell(m), cell(h));
    }
    Ok(out)
}

/// `tollgate top`: once, or refreshed every interval until Ctrl-C.
pub async fn run(args: &TopArgs) -> anyhow::Result<()> {
    let token = crate::cli::counters::token(args.token_file.as_deref())?;
    if args.once {
        print!("{}", fleet(args, token.as_deref()).await?);
        return Ok(());
    }
    loop {
        let text = match fleet(args, token.as_deref()).await {
            Ok(t) => t,
            Err(e) => format!("error: {e}\n"),
        };
        // Home and clear, then the table, as top redraws.
        print!("\x1b[H\x1b[2J{text}");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            () = tokio::time::sleep(args.interval) => {}
        }
    }
}
