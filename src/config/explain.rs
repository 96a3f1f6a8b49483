//! Every limit in its own terms, for people: `50 USD per calendar month (UTC)`, `100 per
//! minute shared by every tenant; interactive 60, batch 20, borrowing up to 80`, `300 per 2 s
//! across eu, us, ap (home eu)`. What `check-config` prints, `/rlconfig?view=human` serves and
//! the status page shows; [`Config::describe`] keeps envoyproxy/ratelimit's lines for the tools
//! that parse them.

use std::fmt::Write as _;

use super::{Config, Level, Pattern, Rule};
use crate::limit::calendar::Period;
use crate::limit::{Algorithm, Limit};

impl Config {
    /// One line per limit, sorted by domain then rule: `<domain>.<rule> (<name>): <terms>`.
    pub fn explain(&self) -> String {
        let mut names: Vec<&String> = self.domains.keys().collect();
        names.sort();
        let mut out = String::new();
        for name in names {
            let d = &self.domains[name];
            let currency = d.prices.as_ref().map(|p| p.currency.as_str());
            explain_level(&d.root, currency, &mut out);
        }
        out
    }
}

fn explain_level(level: &Level, currency: Option<&str>, out: &mut String) {
    for rule in level.rules() {
        if rule.unlimited {
            let _ = writeln!(out, "{}: unlimited", rule.full_key);
        }
        for l in &rule.limits {
            let _ = write!(out, "{}", rule.full_key);
            if !l.name.is_empty() {
                let _ = write!(out, " ({})", l.name);
            }
            let _ = writeln!(out, ": {}", terms(rule, l, currency));
        }
        explain_level(&rule.children, currency, out);
    }
}

/// One limit in its own terms (without its rule's name).
pub fn terms(rule: &Rule, l: &Limit, currency: Option<&str>) -> String {
    let mut s = how_much(l, currency);
    whose(rule, l, &mut s);
    divided(l, &mut s);
    let p = &l.params;
    if l.lease > 0 {
        let _ = write!(s, "; each instance leases {} at a time", l.lease);
    }
    if p.max_wait_us > 0 {
        let _ = write!(s, "; waits up to {} for room", span(p.max_wait_us / 1000));
    }
    for (on, text) in [
        (p.overdraft, "; usage always lands (overdraft)"),
        (rule.hierarchical, "; also for the descriptors below it"),
        (rule.shadow_mode, "; shadow mode (counted, never refused)"),
        (rule.quota_mode, "; quota mode"),
    ] {
        if on {
            s.push_str(text);
        }
    }
    s
}

/// How much, per what: `50 USD per calendar month (UTC)`, `8 at once, …`.
fn how_much(l: &Limit, currency: Option<&str>) -> String {
    let p = &l.params;
    let mut s = String::new();
    if p.algorithm == Algorithm::Concurrency {
        let _ = write!(
            s,
            "{} at once, each held up to {} unless released",
            p.limit,
            span(p.window_us / 1000)
        );
        return s;
    }
    let amount = match (l.spend, currency) {
        (true, c) => format!(
            "{} {}",
            crate::limit::money::format_micros(p.limit),
            c.unwrap_or("")
        ),
        (false, _) => p.limit.to_string(),
    };
    let amount = amount.trim_end();
    match (&p.calendar, p.algorithm) {
        (Some(c), _) => {
            let _ = write!(
                s,
                "{amount} per calendar {} ({}",
                c.period.name(),
                c.zone.name
            );
            if c.period == Period::Week {
                let _ = write!(s, ", weeks from {}", c.week_starts_name());
            }
            s.push(')');
        }
        (None, Algorithm::TokenBucket) => {
            let _ = write!(
                s,
                "{amount} per {}, refilled continuously, bursts up to {}",
                per(p.window_us / 1000),
                p.burst
            );
        }
        (None, Algorithm::SlidingWindow) => {
            let _ = write!(s, "{amount} per trailing {}", per(p.window_us / 1000));
        }
        (None, _) => {
            let _ = write!(s, "{amount} per {}", per(p.window_us / 1000));
        }
    }
    s
}

/// Whose: `per tenant`, `for api_key=abc`, `shared by every tenant`, `across eu, us (home eu)`.
fn whose(rule: &Rule, l: &Limit, s: &mut String) {
    let key = rule.key.as_str();
    if let Some(g) = &l.global {
        let _ = write!(s, " across {} (home {})", g.regions.join(", "), g.home);
        match g.safe_share {
            Some(f) => {
                let _ = write!(
                    s,
                    "; cut off from home a region spends up to {} a window",
                    units(f, l.params.limit)
                );
            }
            None => s.push_str("; cut off from home, refused"),
        }
    } else if l.shared {
        let _ = write!(s, " shared by every {}", whom(rule));
    } else {
        let _ = match &rule.pattern {
            Pattern::Any => write!(s, " per {key}"),
            Pattern::Exact(v) => write!(s, " for {key}={v}"),
            Pattern::Wildcard(_) => write!(s, " per {key} matching its pattern"),
        };
    }
}

/// How a pool is divided: its classes' guarantees, or its fair share.
fn divided(l: &Limit, s: &mut String) {
    if let Some(sh) = &l.shares {
        s.push_str("; ");
        // The largest guarantee first, as people say them.
        let mut classes: Vec<_> = sh.classes.iter().collect();
        classes.sort_by_key(|c| std::cmp::Reverse(c.limit.params.limit));
        for (i, c) in classes.into_iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(s, "{sep}{} {}", c.name, c.limit.params.limit);
        }
        let borrow = sh
            .classes
            .first()
            .map_or(0, |c| c.limit.params.borrow_until);
        let _ = write!(
            s,
            ", borrowing up to {borrow} (by {}, default {})",
            sh.by, sh.classes[sh.default].name
        );
    }
    if let Some(f) = &l.fair_share {
        let _ = write!(
            s,
            "; past {} each active {} gets the pool ÷ the active {}s, at least {}",
            f.tenant.params.borrow_until, f.by, f.by, f.floor
        );
    }
}

/// Whom a shared limit's users are: `tenant` (a rule matching any value), or every request for
/// a rule naming one value (`model=gpt-4o`: "every request for model=gpt-4o").
fn whom(rule: &Rule) -> String {
    match &rule.pattern {
        Pattern::Any => rule.key.clone(),
        Pattern::Exact(v) => format!("request for {}={v}", rule.key),
        Pattern::Wildcard(_) => format!("{} matching its pattern", rule.key),
    }
}

/// `fraction` of `limit`, in whole units rounded down.
fn units(fraction: f64, limit: u64) -> u64 {
    (fraction * limit as f64).floor() as u64
}

/// A window as its unit when it is one (`minute`, `2 s`, `90 s`, `1 h 30 min`).
fn per(ms: u64) -> String {
    match ms {
        1_000 => "second".into(),
        60_000 => "minute".into(),
        3_600_000 => "hour".into(),
        86_400_000 => "day".into(),
        604_800_000 => "week".into(),
        _ => span(ms),
    }
}

/// A span of milliseconds in the largest units that add up to it exactly: `2 s`,
/// `1 h 30 min`, `3 d`, `250 ms`.
fn span(ms: u64) -> String {
    if ms == 0 {
        return "0 s".into();
    }
    let mut parts = Vec::new();
    let mut left = ms;
    for (size, name) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1_000, "s"),
        (1, "ms"),
    ] {
        if left >= size {
            parts.push(format!("{} {name}", left / size));
            left %= size;
        }
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::compile::compile_file;
    use crate::config::usage::UsageDomains;

    fn explained(yaml: &str) -> String {
        let domain = compile_file("t.yaml", yaml, &UsageDomains::default()).expect("compiles");
        let mut config = Config::default();
        config.domains.insert(domain.name.clone(), domain);
        config.explain()
    }

    #[test]
    fn each_limit_reads_in_its_own_terms() {
        let got = explained(
            r#"domain: llm
prices:
  currency: EUR
  per_million_tokens:
    m: {input: 1, output: 2}
descriptors:
  - key: tenant_spend
    rate_limit: {name: monthly, calendar: month, spend: 50, overdraft: true}
  - key: model
    value: gpt-4o
    rate_limit:
      unit: minute
      requests_per_unit: 100
      shared: true
      shares: {by: priority, classes: {interactive: 0.6, batch: 0.2}, default: batch}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 300, window: 2s}
  - key: api_key
    value: abc
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 20, max_wait: 250ms}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_window}
  - key: slots
    rate_limit: {algorithm: concurrency, requests_per_unit: 8, lease_ttl: 90s}
  - key: pool
    rate_limit:
      unit: minute
      requests_per_unit: 1000
      shared: true
      fair_share: {by: tenant}
  - key: free
    rate_limit: {unlimited: true}
  - key: region_pool
    rate_limit:
      unit: second
      requests_per_unit: 300
      window: 2s
      shared: true
      global: {home: eu, regions: [eu, us, ap], on_partition: safe_share, safe_share: 0.1}
"#,
        );
        for want in [
            "llm.tenant_spend (monthly): 50 EUR per calendar month (UTC) per tenant_spend; usage always lands (overdraft)",
            "llm.model_gpt-4o: 100 per minute shared by every request for model=gpt-4o; interactive 60, batch 20, borrowing up to 80 (by priority, default batch)",
            "llm.tenant: 300 per 2 s per tenant",
            "llm.api_key_abc: 10 per minute, refilled continuously, bursts up to 20 for api_key=abc; waits up to 250 ms for room",
            "llm.user: 5 per trailing hour per user",
            "llm.slots: 8 at once, each held up to 1 min 30 s unless released per slots",
            "llm.pool: 1000 per minute shared by every pool; past 300 each active tenant gets the pool ÷ the active tenants, at least 1",
            "llm.free: unlimited",
            "llm.region_pool: 300 per 2 s across eu, us, ap (home eu); cut off from home a region spends up to 30 a window",
        ] {
            assert!(got.lines().any(|l| l == want), "no\n  {want}\nin\n{got}");
        }
    }

    #[test]
    fn spans_read_in_whole_units() {
        assert_eq!(span(2_000), "2 s");
        assert_eq!(span(5_400_000), "1 h 30 min");
        assert_eq!(span(250), "250 ms");
        assert_eq!(span(259_200_000), "3 d");
        assert_eq!(per(60_000), "minute");
        assert_eq!(per(90_000), "1 min 30 s");
    }
}
