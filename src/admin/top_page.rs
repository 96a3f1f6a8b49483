//! Who is being limited, shown: `GET /top?domain=D[&n=N]` (JSON only), the status page's
//! section (the top descriptors and a chart of OVER_LIMIT per minute), and `tollgate top`, which
//! asks one or more instances and merges them into a fleet view (counts and errors add up, so
//! the merged errors bound the merged counts as each instance's bound its own).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use clap::Args;

use crate::admin::status_page::esc;
use crate::admin::AdminState;
use crate::config::Config;
use crate::store::Store;
use crate::telemetry::top::{Heavy, TopReport, K};

/// Descriptors shown unless `n` says otherwise.
pub const DEFAULT_N: usize = 20;

/// This instance's name in `/top` answers: its host name.
fn instance() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "tollgate".into())
}

/// `GET /top?domain=D[&n=N]`.
pub async fn endpoint<S: Store>(
    State(st): State<std::sync::Arc<AdminState<S>>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Some(r) = crate::admin::refused(&st, &headers) {
        return r;
    }
    let (mut domain, mut n) = (None, DEFAULT_N);
    for (k, v) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match &*k {
            "domain" => domain = Some(v.into_owned()),
            "n" => match v.parse::<usize>() {
                Ok(x) if (1..=K).contains(&x) => n = x,
                _ => {
                    return (StatusCode::BAD_REQUEST, format!("n must be 1 to {K}\n"))
                        .into_response()
                }
            },
            _ => {}
        }
    }
    let Some(domain) = domain.filter(|d| !d.is_empty()) else {
        return (
            StatusCode::BAD_REQUEST,
            "a domain is required: /top?domain=D\n",
        )
            .into_response();
    };
    if !st.config.load().domains.contains_key(&domain) {
        return (
            StatusCode::NOT_FOUND,
            format!(
                "domain '{}' is not configured\n",
                crate::base::log_throttle::printable(&domain)
            ),
        )
            .into_response();
    }
    let report = st
        .limiter
        .top()
        .report(&domain, n)
        .unwrap_or_else(|| TopReport {
            minute: Vec::new(),
            hour: Vec::new(),
            total_minute: 0,
            total_hour: 0,
            per_minute: vec![0; 60],
        });
    let body = serde_json::json!({
        "domain": domain,
        "instance": instance(),
        "k": K,
        "minute": report.minute,
        "hour": report.hour,
        "total_minute": report.total_minute,
        "total_hour": report.total_hour,
        "per_minute": report.per_minute,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The status page's section: per domain with OVER_LIMIT answers, the top descriptors of the
/// last minute and hour, and a bar chart of the last 60 minutes.
pub fn section<S: Store>(st: &AdminState<S>, config: &Config, page: &mut String) {
    page.push_str("<section id=\"top\"><h2>Limited right now</h2>");
    let mut names: Vec<&String> = config.domains.keys().collect();
    names.sort();
    let mut any = false;
    for d in names {
        let Some(r) = st.limiter.top().report(d, DEFAULT_N) else {
            continue;
        };
        if r.total_hour == 0 {
            continue;
        }
        any = true;
        let _ = write!(
            page,
            "<h3>{}</h3><p class=\"muted\">{} OVER_LIMIT answers in the last minute, {} in the \
             last hour (this instance; counts may overstate by the ± shown).</p>",
            esc(d),
            r.total_minute,
            r.total_hour
        );
        chart(&r.per_minute, page);
        page.push_str("<table><tr><th>descriptor</th><th>last minute</th><th>last hour</th></tr>");
        let minute: HashMap<&str, &Heavy> = r
            .minute
            .iter()
            .map(|h| (h.descriptor.as_str(), h))
            .collect();
        for h in &r.hour {
            let m = minute
                .get(h.descriptor.as_str())
                .map_or("0".to_string(), |m| count(m));
            let _ = write!(
                page,
                "<tr><td><code>{}</code></td><td>{m}</td><td>{}</td></tr>",
                esc(&h.descriptor),
                count(h)
            );
        }
        page.push_str("</table>");
    }
    if !any {
        page.push_str("<p class=\"muted\">No OVER_LIMIT answer in the last hour.</p>");
    }
    page.push_str("</section>");
}

fn count(h: &Heavy) -> String {
    if h.error > 0 {
        format!("{} ±{}", h.over_limit, h.error)
    } else {
        h.over_limit.to_string()
    }
}

/// OVER_LIMIT per minute as inline SVG bars, oldest left.
fn chart(per_minute: &[u64], page: &mut String) {
    let (w, h, bar) = (600u64, 80u64, 10u64);
    let max = per_minute.iter().copied().max().unwrap_or(0).max(1);
    let _ = write!(
        page,
        "<svg width=\"{w}\" height=\"{}\" role=\"img\" aria-label=\"OVER_LIMIT answers per \
         minute, last 60 minutes\"><line class=\"axis\" x1=\"0\" y1=\"{h}\" x2=\"{w}\" y2=\"{h}\"/>",
        h + 14
    );
    for (i, &c) in per_minute.iter().enumerate() {
        let bh = c * h / max;
        if bh > 0 {
            let _ = write!(
                page,
                "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{bh}\"><title>{c}</title></rect>",
                i as u64 * bar,
                h - bh,
                bar - 2
            );
        }
    }
    let _ = write!(
        page,
        "<text x=\"0\" y=\"{}\">60 min ago</text><text x=\"{}\" y=\"{}\">now (max {max}/min)</text></svg>",
        h + 12,
        w - 110,
        h + 12
    );
}

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
