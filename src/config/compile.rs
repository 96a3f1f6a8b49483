//! Validates a parsed YAML file and compiles it into a [`Domain`] match tree.
//!
//! Error wording follows envoyproxy/ratelimit where it has one, prefixed with the file and,
//! for rules, the composite key (`domain.key_value.key2`) that locates the rule.

use std::collections::HashSet;
use std::sync::Arc;

use super::raw::{RawFile, RawLimit, RawRule};
use super::{ConfigError, Domain, DomainPolicy, Level, Pattern, Rule, UsageDomains};
use crate::duration;
use crate::limit::{
    default_key_suffix, Algorithm, Limit, LimitParams, Unit, ALGORITHM_NAMES, UNIT_NAMES,
};

/// Parses and compiles one YAML file's text. `file` names it in errors; a domain that
/// `usage_domains` names gets overdraft limits only (see [`UsageDomains`]).
pub fn compile_file(
    file: &str,
    text: &str,
    usage_domains: &UsageDomains,
) -> Result<Domain, ConfigError> {
    let raw: RawFile = if text.trim().is_empty() {
        RawFile::default()
    } else {
        // The whole document is parsed first, so a syntax error is what gets reported, not
        // a scalar field that met the half-written list it starts.
        serde_yaml::from_str::<serde::de::IgnoredAny>(text)
            .map_err(|e| ConfigError::yaml(file, &e))?;
        serde_yaml::from_str(text).map_err(|e| ConfigError::yaml(file, &e))?
    };
    let err = |msg: String| ConfigError::new(file, None, msg);
    let domain = match raw.domain {
        Some(d) if !d.is_empty() => d,
        _ => return Err(err("config file cannot have empty domain".into())),
    };
    if raw.max_hits == Some(0) {
        return Err(err(format!(
            "domain '{domain}': max_hits must be at least 1 (it is the largest cost one descriptor may carry)"
        )));
    }
    let usage = usage_domains.matches(&domain);
    let mut root = Level::default();
    for rule in raw.descriptors.unwrap_or_default() {
        compile_rule(&domain, rule, &mut root, usage).map_err(err)?;
    }
    Ok(Domain {
        name: domain,
        root,
        policy: DomainPolicy {
            disabled: raw.disabled,
            allow_overrides: raw.allow_overrides.unwrap_or(true),
            max_hits: raw.max_hits,
            usage,
        },
    })
}

/// Compiles one rule and its children into `level`; `usage`: the domain is a usage domain.
fn compile_rule(
    parent_key: &str,
    raw: RawRule,
    level: &mut Level,
    usage: bool,
) -> Result<(), String> {
    let key = match raw.key {
        Some(k) if !k.is_empty() => k,
        _ => return Err(format!("'{parent_key}': descriptor has empty key")),
    };
    let value = raw.value.unwrap_or_default();
    let full_key = if value.is_empty() {
        format!("{parent_key}.{key}")
    } else {
        format!("{parent_key}.{key}_{value}")
    };
    let at = |msg: &str| format!("'{full_key}': {msg}");
    let pattern = Pattern::parse(&value);
    if raw.share_threshold && !matches!(pattern, Pattern::Wildcard(_)) {
        return Err(format!(
            "share_threshold can only be used with wildcard values (containing '*'), but found key '{full_key}'"
        ));
    }

    let mut raw_limits: Vec<RawLimit> = raw.rate_limit.into_iter().collect();
    raw_limits.extend(raw.rate_limits.unwrap_or_default());
    let mut limits = Vec::with_capacity(raw_limits.len());
    let mut unlimited = false;
    let mut unlimited_replaces = Vec::new();
    let mut suffixes = HashSet::new();
    let n_limits = raw_limits.len();
    for (i, rl) in raw_limits.into_iter().enumerate() {
        let replaces = compile_replaces(&rl).map_err(|m| at(&m))?;
        if rl.unlimited {
            if rl.unit.as_deref().is_some_and(|u| !u.is_empty()) {
                return Err(at("should not specify rate limit unit when unlimited"));
            }
            if n_limits > 1 {
                return Err(at(
                    "an unlimited rate limit cannot be combined with other limits",
                ));
            }
            unlimited = true;
            unlimited_replaces = replaces;
            continue;
        }
        let mut limit = compile_limit(rl, replaces, usage).map_err(|m| at(&m))?;
        if limit.metric_label.is_empty() {
            limit.metric_label = full_key.clone();
        }
        if !suffixes.insert(limit.key_suffix.clone()) {
            limit.key_suffix.push_str(&format!("#{i}"));
            suffixes.insert(limit.key_suffix.clone());
        }
        limits.push(Arc::new(limit));
    }
    if limits.iter().filter(|l| l.shared).count() > 1 && limits.iter().any(|l| l.lease > 0) {
        return Err(at(
            "lease: a rule with more than one shared limit cannot lease them (one script call decides them together); give the leased limit a rule of its own",
        ));
    }
    let metadata = match raw.metadata {
        None => None,
        Some(m) => match serde_json::to_value(&m) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            _ => return Err(at("metadata must be a map with string keys")),
        },
    };

    let mut children = Level::default();
    for child in raw.descriptors.unwrap_or_default() {
        compile_rule(&full_key, child, &mut children, usage)?;
    }
    let rule = Rule {
        key,
        pattern,
        limits,
        unlimited,
        unlimited_replaces,
        shadow_mode: raw.shadow_mode,
        quota_mode: raw.quota_mode,
        hierarchical: raw.hierarchical,
        share_threshold: raw.share_threshold,
        detailed_metric: raw.detailed_metric,
        value_to_metric: raw.value_to_metric,
        metadata,
        full_key,
        children,
    };
    level
        .insert(rule)
        .map_err(|k| format!("duplicate descriptor composite key '{k}'"))
}

fn compile_replaces(rl: &RawLimit) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for r in rl.replaces.iter().flatten() {
        let name = r.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err("should not have an empty replaces entry".into());
        }
        if rl.name.as_deref() == Some(name.as_str()) {
            return Err("replaces should not contain name of same descriptor".into());
        }
        out.push(name);
    }
    Ok(out)
}

fn compile_limit(rl: RawLimit, replaces: Vec<String>, usage: bool) -> Result<Limit, String> {
    let unit_text = rl.unit.unwrap_or_default();
    let unit = Unit::parse(&unit_text)
        .ok_or_else(|| format!("invalid rate limit unit '{unit_text}'; expected {UNIT_NAMES}"))?;
    let requests_per_unit = rl.requests_per_unit.unwrap_or(0);
    let algorithm = match rl.algorithm.as_deref() {
        None => Algorithm::FixedWindow,
        Some(a) => Algorithm::parse(a)
            .ok_or_else(|| format!("invalid algorithm '{a}'; expected {ALGORITHM_NAMES}"))?,
    };
    let window_us = match rl.window.as_deref() {
        None => unit.seconds() * 1_000_000,
        Some(w) => window_us(w)?,
    };
    let burst = match (rl.burst, algorithm) {
        (None, _) => requests_per_unit as u64,
        (Some(b), Algorithm::TokenBucket) if b > 0 => b,
        (Some(_), Algorithm::TokenBucket) => return Err("burst must be at least 1".into()),
        (Some(_), _) => return Err("burst is only valid with algorithm token_bucket".into()),
    };
    if algorithm == Algorithm::TokenBucket && requests_per_unit == 0 {
        return Err("a token_bucket limit needs requests_per_unit of at least 1".into());
    }
    if algorithm == Algorithm::TokenBucket {
        check_token_bucket_size(burst, requests_per_unit as u64, window_us)?;
    }
    let params = LimitParams {
        algorithm,
        limit: requests_per_unit as u64,
        window_us,
        burst,
        overdraft: rl.overdraft || usage,
    };
    if let Some(lease) = rl.lease {
        check_lease(lease, rl.shared, &params).map_err(|e| {
            if usage && !rl.overdraft {
                format!(
                    "{e} (every limit of a usage domain, --usage-domains, is an overdraft limit)"
                )
            } else {
                e
            }
        })?;
    }
    let mut limit = Limit::new(rl.name.unwrap_or_default(), unit, requests_per_unit, params);
    limit.shared = rl.shared;
    limit.lease = rl.lease.unwrap_or(0);
    limit.replaces = replaces;
    limit.key_suffix = default_key_suffix(&params);
    Ok(limit)
}

/// `lease: N`: a shared fixed-window limit (whose leased units expire with the window they were
/// charged in), N from 1 to `requests_per_unit`.
fn check_lease(lease: u64, shared: bool, p: &LimitParams) -> Result<(), String> {
    if !shared {
        return Err("lease is only valid on a shared limit (shared: true)".into());
    }
    if p.algorithm != Algorithm::FixedWindow {
        return Err("lease needs algorithm fixed_window: leased units expire with the window they were charged in".into());
    }
    if p.overdraft {
        return Err("lease cannot be combined with overdraft".into());
    }
    if lease == 0 || lease > p.limit {
        return Err(format!(
            "lease must be from 1 to requests_per_unit ({}), found {lease}",
            p.limit
        ));
    }
    Ok(())
}

/// The longest `window`: ten years. A window's end (now plus the window, in µs since the
/// epoch) must stay below 2^53 for the Redis script to hold it exactly; this keeps it far
/// below.
const MAX_WINDOW_US: u64 = 3650 * 86_400 * 1_000_000;

/// A limit's `window`: a positive whole number of milliseconds, in microseconds.
pub(super) fn window_us(text: &str) -> Result<u64, String> {
    match duration::parse(text) {
        Ok(d) if d.as_micros() > u128::from(MAX_WINDOW_US) => Err(format!(
            "invalid window '{text}': the longest window is 3650d (ten years)"
        )),
        Ok(d) if !d.is_zero() && d.subsec_nanos() % 1_000_000 == 0 => Ok(d.as_micros() as u64),
        _ => Err(format!(
            "invalid window '{text}': expected a positive whole number of milliseconds, like 500ms, 90s, 5m, 1h30m or 1d"
        )),
    }
}

/// The Redis script computes a token bucket exactly with numbers below 2^53. Its largest
/// products are `units × limit` and `units × window / limit` for up to
/// `(1 + DEBT_CAP_FACTOR) × burst` units, which must stay below 2^52 (so that adding the time
/// since the epoch stays below 2^53).
fn check_token_bucket_size(burst: u64, limit: u64, window_us: u64) -> Result<(), String> {
    let units = burst as u128 * (crate::limit::DEBT_CAP_FACTOR as u128 + 1);
    let widest = (limit as u128).max((window_us as u128).div_ceil(limit as u128));
    if units * widest >= 1u128 << 52 {
        return Err(format!(
            "token_bucket with burst {burst}, requests_per_unit {limit} and a {} window is too large to compute exactly: keep 101 × burst × max(requests_per_unit, window in µs / requests_per_unit) under 2^52, or use fixed_window or sliding_window",
            crate::duration::format(std::time::Duration::from_micros(window_us))
        ));
    }
    Ok(())
}
