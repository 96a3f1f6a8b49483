//! `tollgate counters` and `tollgate reset`: the operator's commands, over the admin HTTP
//! endpoints (`GET /counters` on the admin port, `POST /counters/reset` on the write
//! listener), so they work against any instance from anywhere the port is reachable.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::admin::counters::{query_string, table, CounterView, Selector};

/// `serve`'s admin flags beyond its addresses.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// Serve POST /json on the admin port. It charges real counters with caller-chosen hits
    /// and is unauthenticated: off by default.
    #[arg(long, env = "TOLLGATE_ADMIN_JSON")]
    pub admin_json: bool,
    /// Listen address for the admin writes (POST /counters/reset); unset: none. Needs
    /// --admin-token-file. Keep it off the Service: it resets counters.
    #[arg(long, env = "TOLLGATE_ADMIN_WRITE_ADDR")]
    pub admin_write_addr: Option<SocketAddr>,
    /// File holding the admin bearer token: required on --admin-write-addr and, once set,
    /// by /counters, /top and the status page too (Authorization: Bearer <token>).
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Serve the status page at / on the admin port (`--admin-ui=false`: not at all).
    #[arg(long, env = "TOLLGATE_ADMIN_UI", default_value_t = true, action = clap::ArgAction::Set)]
    pub admin_ui: bool,
    /// Open connections per admin listener at most; one more is closed as soon as it is
    /// accepted. (A client must also send a request's header within 10 s.)
    #[arg(
        long,
        env = "TOLLGATE_ADMIN_MAX_CONNECTIONS",
        default_value_t = 256,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub admin_max_connections: u32,
}

/// Which counters, as the commands take them.
#[derive(Debug, Args)]
pub struct SelectorArgs {
    #[arg(long, env = "TOLLGATE_DOMAIN")]
    pub domain: String,
    /// The descriptor as `key=value,key2=value2` (a value holding `,` needs --entry).
    #[arg(long)]
    pub descriptor: Option<String>,
    /// One entry as `key=value`, the value taken whole (it may hold `,` and `=`); repeat in
    /// descriptor order. Follows --descriptor's entries.
    #[arg(long = "entry")]
    pub entries: Vec<String>,
    /// The admin bearer token's file (--admin-token-file of the server).
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Print the server's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CountersArgs {
    /// The admin HTTP address of an instance.
    #[arg(
        long,
        env = "TOLLGATE_ADMIN_ADDR",
        default_value = "http://127.0.0.1:8080"
    )]
    pub addr: String,
    #[command(flatten)]
    pub selector: SelectorArgs,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The write listener of an instance (its --admin-write-addr).
    #[arg(long, env = "TOLLGATE_ADMIN_WRITE_ADDR")]
    pub addr: String,
    /// Reset only the limit of this name (a shared limit is reset only when named).
    #[arg(long)]
    pub limit: Option<String>,
    #[command(flatten)]
    pub selector: SelectorArgs,
}

fn selector(args: &SelectorArgs, limit: Option<String>) -> anyhow::Result<Selector> {
    let mut entries = Vec::new();
    let pairs = args
        .descriptor
        .iter()
        .flat_map(|d| d.split(','))
        .chain(args.entries.iter().map(String::as_str));
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("'{pair}' is not key=value"))?;
        entries.push((k.to_string(), v.to_string()));
    }
    if entries.is_empty() {
        anyhow::bail!("give the descriptor: --descriptor key=value,… or --entry key=value");
    }
    Ok(Selector {
        domain: args.domain.clone(),
        entries,
        limit,
    })
}

/// The admin token in the file at `path`, if one is given.
pub(crate) fn token(path: Option<&Path>) -> anyhow::Result<Option<String>> {
    path.map(|p| {
        let raw = std::fs::read_to_string(p)
            .map_err(|e| anyhow::anyhow!("cannot read --token-file {}: {e}", p.display()))?;
        Ok(raw.trim().to_string())
    })
    .transpose()
}

/// Sends the request and returns the body of a 2xx answer; anything else is an error naming
/// the status and what the server said.
async fn send(request: reqwest::RequestBuilder, token: Option<String>) -> anyhow::Result<String> {
    let request = match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    };
    let response = request.send().await?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        anyhow::bail!("{status}: {}", body.trim());
    }
    Ok(body)
}

/// An admin address as a URL base: `http://` added when no scheme is given.
pub(crate) fn base(addr: &str) -> String {
    let addr = addr.trim_end_matches('/');
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// `tollgate counters`: the table (or JSON) of what the descriptor's counters hold.
pub async fn counters(args: &CountersArgs) -> anyhow::Result<String> {
    let sel = selector(&args.selector, None)?;
    let url = format!("{}/counters?{}", base(&args.addr), query_string(&sel));
    let body = send(
        reqwest::Client::new().get(url),
        token(args.selector.token_file.as_deref())?,
    )
    .await?;
    if args.selector.json {
        return Ok(body + "\n");
    }
    #[derive(serde::Deserialize)]
    struct CountersReply {
        counters: Vec<CounterRow>,
    }
    let answer: CountersReply = serde_json::from_str(&body)?;
    let views: Vec<CounterView> = answer
        .counters
        .into_iter()
        .map(CounterRow::into_view)
        .collect();
    if views.is_empty() {
        return Ok("no limit applies to that descriptor\n".into());
    }
    Ok(table(&views))
}

/// `tollgate reset`: what was reset, one line per limit.
pub async fn reset(args: &ResetArgs) -> anyhow::Result<String> {
    let sel = selector(&args.selector, args.limit.clone())?;
    let url = format!("{}/counters/reset?{}", base(&args.addr), query_string(&sel));
    let token = token(args.selector.token_file.as_deref())?;
    if token.is_none() {
        anyhow::bail!("resets need the admin token: --token-file (or TOLLGATE_ADMIN_TOKEN_FILE)");
    }
    let body = send(reqwest::Client::new().post(url), token).await?;
    if args.selector.json {
        return Ok(body + "\n");
    }
    #[derive(serde::Deserialize)]
    struct ResetReply {
        reset: Vec<ResetRow>,
    }
    let answer: ResetReply = serde_json::from_str(&body)?;
    let mut out = String::new();
    for v in answer.reset {
        out.push_str(&format!(
            "reset {} ({}): {}\n",
            crate::base::log_throttle::printable(&v.name),
            crate::base::log_throttle::printable(&v.key),
            if v.cleared {
                format!("cleared {} used", v.used_before)
            } else {
                "held nothing".to_string()
            }
        ));
    }
    Ok(out)
}

/// A counter as the JSON carries it (the view's strings are owned here).
#[derive(serde::Deserialize)]
struct CounterRow {
    name: String,
    algorithm: String,
    window: String,
    limit: u64,
    used: u64,
    remaining: u64,
    reset_after_s: u64,
    resets_at_unix_ms: u64,
    overdraft_debt: u64,
    lease: u64,
    key: String,
    shared: bool,
    role: String,
    #[serde(default)]
    currency: Option<String>,
}

impl CounterRow {
    fn into_view(self) -> CounterView {
        CounterView {
            name: self.name,
            algorithm: crate::limit::Algorithm::parse(&self.algorithm)
                .map_or("unknown", |a| a.name()),
            window: self.window,
            limit: self.limit,
            used: self.used,
            remaining: self.remaining,
            reset_after_s: self.reset_after_s,
            resets_at_unix_ms: self.resets_at_unix_ms,
            overdraft_debt: self.overdraft_debt,
            lease: self.lease,
            key: self.key,
            shared: self.shared,
            role: match self.role.as_str() {
                "shadow" => "shadow",
                "quota" => "quota",
                _ => "enforced",
            },
            currency: self.currency,
        }
    }
}

#[derive(serde::Deserialize)]
struct ResetRow {
    name: String,
    key: String,
    cleared: bool,
    used_before: u64,
}
