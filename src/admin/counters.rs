//! The operator's view of counters: what a descriptor's limits hold now (`GET /counters`,
//! `tollgate counters`), never writing, and resetting them on purpose (`POST /counters/reset`
//! on the write listener, `tollgate reset`).
//!
//! A descriptor is planned as a check-only request (every cost 0) would be, so the limits
//! shown are exactly those a request with that descriptor reaches: hierarchical and shared
//! ones included, overrides aside. The store reads each counter's state and its now (Redis
//! `TIME` under `--clock redis`) and the numbers come from [`crate::algorithm::inspect`], the
//! same functions the decisions answer from, so `remaining` and the reset time are what a
//! `hits_addend: 0` decision would report.
//!
//! A selector names a domain and one descriptor's entries: `descriptor=k=v,k2=v2` with each
//! key and value percent-encoded (so a value may hold `,`, `=` or `&`), or `key=k&value=v`
//! pairs in order (what an HTML form sends); `limit=NAME` picks one limit for a reset.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;

use crate::algorithm::inspect::{self, Usage};
use crate::algorithm::rule::Role;
use crate::config::Config;
use crate::limit::CLASS_MARK;
use crate::limit::{Algorithm, Limit};
use crate::pb::common::rate_limit_descriptor::Entry;
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::RateLimitRequest;
use crate::plan::pipeline::plan;
use crate::plan::{Plan, PlannedCharge};
use crate::service::error::InvalidRequest;
use crate::service::validate::{validate, Bounds};
use crate::store::error::StoreError;
use crate::store::GlobalHeld;
use crate::store::Store;

/// Which counters an operator asks about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub domain: String,
    pub entries: Vec<(String, String)>,
    /// A reset of one limit, by name.
    pub limit: Option<String>,
}

impl Selector {
    /// The descriptor as logs and the status page show it: `k=v,k2=v2`, each key and value
    /// through the log's bound.
    pub fn printable_descriptor(&self) -> String {
        let mut out = String::new();
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{}={}",
                crate::base::log_throttle::printable(k),
                crate::base::log_throttle::printable(v)
            );
        }
        out
    }
}

/// Why an operator's request cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// The query does not say what to look at: 400.
    #[error(transparent)]
    BadQuery(#[from] QueryError),
    /// The descriptor it names is not one a request could carry: 400.
    #[error(transparent)]
    BadDescriptor(#[from] InvalidRequest),
    /// No such domain or limit: 404.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// The store failed: 503.
    #[error("rate limit store unavailable: {0}")]
    Store(#[from] StoreError),
}

/// What is wrong with an admin query string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("descriptor entry '{0}' is not key=value")]
    NotKeyValue(String),
    #[error("{keys} key= but {values} value= parameters: they go in pairs")]
    Unpaired { keys: usize, values: usize },
    #[error("a domain is required: ?domain=D&descriptor=k=v")]
    NoDomain,
    #[error(
        "a descriptor is required: &descriptor=k=v,k2=v2 (keys and values percent-encoded) or \
         &key=k&value=v pairs"
    )]
    NoDescriptor,
    #[error("'{0}' has a bad percent escape")]
    BadEscape(String),
    #[error("'{0}' is not UTF-8 once decoded")]
    NotUtf8(String),
}

/// What the query names that does not exist (values shown printable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFound {
    #[error("domain '{0}' is not configured")]
    Domain(String),
    #[error("no limit named '{name}' applies to that descriptor (its limits: {limits})")]
    Limit { name: String, limits: String },
    #[error("no limit applies to that descriptor")]
    NoLimit,
    #[error("that descriptor reaches only shared limits; name one with limit= ({0})")]
    OnlyShared(String),
}

/// One limit's counter as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterView {
    /// The limit's `name`, else its rule's path.
    pub name: String,
    pub algorithm: &'static str,
    /// `60s`, or a calendar period in its zone (`month@America/New_York`), or a concurrency
    /// limit's lease (`lease 300s`).
    pub window: String,
    /// The limit (a token bucket: its capacity).
    pub limit: u64,
    pub used: u64,
    pub remaining: u64,
    /// Until the counter is whole again, in whole seconds rounded up.
    pub reset_after_s: u64,
    /// When that is, Unix milliseconds on the store's clock.
    pub resets_at_unix_ms: u64,
    /// Usage beyond the limit (overdraft debt).
    pub overdraft_debt: u64,
    /// Units this instance holds in a lease on it (`lease:`).
    pub lease: u64,
    pub key: String,
    pub shared: bool,
    /// `enforced`, `shadow` or `quota`.
    pub role: &'static str,
    /// A `spend:` limit's currency: its numbers are micro-units of it (`limit::money`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

impl CounterView {
    /// `n` of this counter as an operator reads it: a count, or an amount of money with its
    /// currency (`0.0075 USD`).
    pub fn amount(&self, n: u64) -> String {
        match &self.currency {
            Some(c) => format!("{} {c}", crate::limit::money::format_micros(n)),
            None => n.to_string(),
        }
    }
}

/// What a reset did to one limit's counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResetView {
    pub name: String,
    pub key: String,
    /// It held usage that the reset cleared.
    pub cleared: bool,
    /// What it held when the reset cleared it.
    pub used_before: u64,
}

/// Parses an admin query string (undecoded, as in the URL).
pub fn parse_query(query: &str) -> Result<Selector, CounterError> {
    let mut sel = Selector::default();
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (name, raw) = part.split_once('=').unwrap_or((part, ""));
        match name {
            "domain" => sel.domain = decode(raw)?,
            "limit" => sel.limit = Some(decode(raw)?).filter(|l| !l.is_empty()),
            // The whole value percent-encoded, as `curl --data-urlencode descriptor=k=v` and
            // Python's `urlencode` write it (no raw `=` in it): decoded, then split. A value
            // holding `,` or `=` needs the form below, or key=/value= pairs.
            "descriptor" if !raw.contains('=') => {
                let text = decode(raw)?;
                for entry in text.split(',').filter(|e| !e.is_empty()) {
                    let (k, v) = entry
                        .split_once('=')
                        .ok_or_else(|| QueryError::NotKeyValue(entry.to_string()))?;
                    sel.entries.push((k.to_string(), v.to_string()));
                }
            }
            "descriptor" => {
                for entry in raw.split(',').filter(|e| !e.is_empty()) {
                    let (k, v) = entry.split_once('=').ok_or_else(|| {
                        QueryError::NotKeyValue(decode(entry).unwrap_or_else(|_| entry.to_string()))
                    })?;
                    sel.entries.push((decode(k)?, decode(v)?));
                }
            }
            "key" => keys.push(decode(raw)?),
            "value" => values.push(decode(raw)?),
            _ => {}
        }
    }
    if keys.len() != values.len() {
        return Err(QueryError::Unpaired {
            keys: keys.len(),
            values: values.len(),
        }
        .into());
    }
    sel.entries.extend(
        keys.into_iter()
            .zip(values)
            .filter(|(k, v)| !(k.is_empty() && v.is_empty())),
    );
    if sel.domain.is_empty() {
        return Err(QueryError::NoDomain.into());
    }
    if sel.entries.is_empty() {
        return Err(QueryError::NoDescriptor.into());
    }
    Ok(sel)
}

/// Percent-decodes one query component (`+` is a space, as forms send it).
fn decode(raw: &str) -> Result<String, QueryError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| QueryError::BadEscape(raw.to_string()))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| QueryError::NotUtf8(raw.to_string()))
}

/// Percent-encodes one query component: everything but unreserved characters.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The query string that selects `sel` (what the CLI sends).
pub fn query_string(sel: &Selector) -> String {
    let mut q = format!("domain={}&descriptor=", encode(&sel.domain));
    for (i, (k, v)) in sel.entries.iter().enumerate() {
        if i > 0 {
            q.push(',');
        }
        let _ = write!(q, "{}={}", encode(k), encode(v));
    }
    if let Some(l) = &sel.limit {
        let _ = write!(q, "&limit={}", encode(l));
    }
    q
}

/// The plan of a check-only request with `sel`'s descriptor.
fn plan_of<'c>(
    config: &'c Config,
    sel: &Selector,
    bounds: &Bounds,
) -> Result<Plan<'c>, CounterError> {
    if !config.domains.contains_key(&sel.domain) {
        return Err(NotFound::Domain(crate::base::log_throttle::printable(&sel.domain)).into());
    }
    let req = RateLimitRequest {
        domain: sel.domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            entries: sel
                .entries
                .iter()
                .map(|(key, value)| Entry {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            hits_addend: Some(0),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    validate(&req, bounds).map_err(InvalidRequest::from)?;
    Ok(plan(config, &req).map_err(InvalidRequest::from)?)
}

fn window_text(l: &Limit) -> String {
    let p = &l.params;
    match (&p.calendar, p.algorithm) {
        (Some(c), _) => format!("{}@{}", c.period.name(), c.zone.name),
        (None, Algorithm::Concurrency) => format!("lease {}s", p.window_us / 1_000_000),
        (None, _) if p.window_us.is_multiple_of(1_000_000) => {
            format!("{}s", p.window_us / 1_000_000)
        }
        (None, _) => format!("{}ms", p.window_us / 1000),
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Enforced => "enforced",
        Role::Shadow => "shadow",
        Role::Quota { .. } => "quota",
    }
}

/// Every counter `sel`'s descriptor reaches, as it stands.
/// A pool with shares is read with every class's counter, not only the one the descriptor
/// names: each class's use beside its guarantee.
fn every_class(plan: &mut Plan<'_>) {
    let mut more: Vec<PlannedCharge<'_>> = Vec::new();
    for c in &plan.charges {
        let Some(shares) = c.limit.shares.as_deref() else {
            continue;
        };
        for class in &shares.classes {
            let key = format!("{}{CLASS_MARK}{}", c.key, class.name);
            if !plan.charges.iter().chain(&more).any(|o| o.key == key) {
                more.push(PlannedCharge {
                    key,
                    limit: Cow::Owned(class.limit.clone()),
                    stats: None,
                    ..c.clone()
                });
            }
        }
    }
    plan.charges.extend(more);
}

pub async fn inspect<S: Store>(
    config: &Config,
    store: &S,
    bounds: &Bounds,
    sel: &Selector,
) -> Result<Vec<CounterView>, CounterError> {
    let mut plan = plan_of(config, sel, bounds)?;
    if plan.charges.is_empty() {
        return Ok(Vec::new());
    }
    every_class(&mut plan);
    let readings = store.read(&plan).await?;
    let currency = config
        .domains
        .get(&sel.domain)
        .and_then(|d| d.prices.as_ref())
        .map(|p| p.currency.clone());
    Ok(plan
        .charges
        .iter()
        .zip(readings)
        .map(|(c, r)| {
            let l = &*c.limit;
            // A global limit: the region's lease counter, as the region holds it.
            let params = GlobalHeld::params(r.held, &l.params);
            let mut usage = inspect::usage(&r.state, &params, r.now_us);
            let limit = GlobalHeld::view(r.held, &mut usage).unwrap_or(params.capacity());
            let Usage {
                used,
                remaining,
                debt,
                reset_after_us,
            } = usage;
            let reset_after_s = reset_after_us.div_ceil(1_000_000);
            CounterView {
                name: l.metric_label.clone(),
                algorithm: l.params.algorithm.name(),
                window: window_text(l),
                limit,
                used,
                remaining,
                reset_after_s,
                resets_at_unix_ms: (r.now_us + reset_after_us).div_ceil(1000),
                overdraft_debt: debt,
                lease: r.lease,
                key: r.key,
                shared: l.shared,
                role: role_name(c.role),
                currency: currency.clone().filter(|_| l.spend),
            }
        })
        .collect())
}

/// Resets `sel`'s counters: the one limit it names (shared ones included), else every limit
/// of the descriptor's own (shared limits only when named).
pub async fn reset<S: Store>(
    config: &Config,
    store: &S,
    bounds: &Bounds,
    sel: &Selector,
) -> Result<Vec<ResetView>, CounterError> {
    let mut plan = plan_of(config, sel, bounds)?;
    every_class(&mut plan);
    let names: Vec<String> = plan
        .charges
        .iter()
        .map(|c| c.limit.metric_label.clone())
        .collect();
    match &sel.limit {
        // A pool's reset takes its classes' counters with it.
        // The count of a pool's active tenants is never reset: the tenants it counted keep
        // their windows, so a count started over would leave them out.
        Some(name) => plan.charges.retain(|c| {
            let l = &c.limit;
            l.params.fair_cap == 0
                && (&l.metric_label == name
                    || &l.name == name
                    || (l.params.is_pool_part()
                        && [&l.metric_label, &l.name]
                            .iter()
                            .any(|n| n.rsplit_once('/').is_some_and(|(pool, _)| pool == name))))
        }),
        None => plan.charges.retain(|c| !c.limit.shared),
    }
    if plan.charges.is_empty() {
        return Err(match &sel.limit {
            Some(name) => NotFound::Limit {
                name: crate::base::log_throttle::printable(name),
                limits: if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                },
            },
            None if names.is_empty() => NotFound::NoLimit,
            None => NotFound::OnlyShared(names.join(", ")),
        }
        .into());
    }
    // The reset answers what each counter held when it cleared it, in the same atomic step.
    let before = store.reset(&plan).await?;
    Ok(plan
        .charges
        .iter()
        .zip(before)
        .map(|(c, r)| {
            let used_before = inspect::usage(&r.state, &c.limit.params, r.now_us).used;
            ResetView {
                name: c.limit.metric_label.clone(),
                key: r.key,
                cleared: used_before > 0,
                used_before,
            }
        })
        .collect())
}

/// `counters` as the CLI prints them: one row per limit.
pub fn table(views: &[CounterView]) -> String {
    let headers = [
        "LIMIT",
        "ALGORITHM",
        "WINDOW",
        "LIMIT",
        "USED",
        "LEFT",
        "RESET",
        "DEBT",
        "LEASE",
        "KEY",
    ];
    let rows: Vec<[String; 10]> = views
        .iter()
        .map(|v| {
            let mut name = crate::base::log_throttle::printable(&v.name);
            if v.shared {
                name.push_str(" (shared)");
            }
            if v.role != "enforced" {
                let _ = write!(name, " ({})", v.role);
            }
            [
                name,
                v.algorithm.to_string(),
                v.window.clone(),
                v.amount(v.limit),
                v.amount(v.used),
                v.amount(v.remaining),
                format!("{}s", v.reset_after_s),
                v.amount(v.overdraft_debt),
                v.lease.to_string(),
                crate::base::log_throttle::printable(&v.key),
            ]
        })
        .collect();
    let mut widths = headers.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&headers);
    for r in &rows {
        line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_encoded_entries_and_form_pairs() {
        let s = parse_query("domain=api&descriptor=tenant=a%2Cb%3Dc,model=gpt%204").unwrap();
        assert_eq!(s.domain, "api");
        assert_eq!(
            s.entries,
            vec![
                ("tenant".to_string(), "a,b=c".to_string()),
                ("model".to_string(), "gpt 4".to_string())
            ]
        );
        let s =
            parse_query("domain=api&key=tenant&value=%3Cscript%3E&key=&value=&limit=x").unwrap();
        assert_eq!(s.entries, vec![("tenant".into(), "<script>".into())]);
        assert_eq!(s.limit.as_deref(), Some("x"));
        let round = Selector {
            domain: "d&x".into(),
            entries: vec![("k,=".into(), "v=,&%".into())],
            limit: Some("a b".into()),
        };
        assert_eq!(parse_query(&query_string(&round)).unwrap(), round);
    }

    #[test]
    fn a_descriptor_encoded_whole_is_read_too() {
        // curl -G --data-urlencode descriptor=api_key=abc,model=gpt 4
        let s = parse_query("domain=api&descriptor=api_key%3Dabc%2Cmodel%3Dgpt%204").unwrap();
        assert_eq!(
            s.entries,
            vec![
                ("api_key".to_string(), "abc".to_string()),
                ("model".to_string(), "gpt 4".to_string())
            ]
        );
        let e = parse_query("domain=d&descriptor=ab%2Ccd")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'ab' is not key=value"), "{e}");
    }

    #[test]
    fn bad_selectors_say_what_is_missing() {
        for (q, says) in [
            ("descriptor=a=b", "a domain is required"),
            ("domain=d", "a descriptor is required"),
            ("domain=d&descriptor=ab", "is not key=value"),
            ("domain=d&key=a", "they go in pairs"),
            ("domain=d&descriptor=a=%zz", "bad percent escape"),
            ("domain=d&descriptor=a=%ff", "not UTF-8"),
        ] {
            let e = parse_query(q).unwrap_err().to_string();
            assert!(e.contains(says), "{q}: {e}");
        }
    }
}
