//! Validates a parsed YAML file and compiles it into a [`Domain`] match tree.
//!
//! Errors ([`super::error`]) name the file and, for rules, the composite key
//! (`domain.key_value.key2`) that locates the rule.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::raw::{
    calendar_unit, check_concurrency, compile_calendar, max_wait_us, slot_hold_us, window_us,
    Amount, RawFile, RawLimit, RawPrices, RawRule, DEFAULT_SLOT_HOLD_US,
};
use super::{Domain, DomainPolicy, Level, Pattern, Rule};
use crate::config::error::{
    ConfigError, ConfigProblem, LeaseError, LimitError, PricesError, RuleError,
};
use crate::config::global::compile_global;
use crate::config::pool::{
    RawFairShare, RawShares, DEFAULT_ABOVE, DEFAULT_BORROW_UNTIL, DEFAULT_MAX_TENANTS,
};
use crate::config::usage::UsageDomains;
use crate::limit::money::{Prices, Table};
use crate::limit::unit::Unit;
use crate::limit::{default_key_suffix, Algorithm, Limit, LimitParams};
use crate::limit::{Class, FairShare, Shares, ACTIVE_MARK, CLASS_MARK, TENANT_MARK};

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
        serde_yaml::from_str::<serde::de::IgnoredAny>(text).map_err(|e| match documents(text) {
            n if n > 1 => ConfigError::new(file, None, ConfigProblem::SeveralDocuments(n)),
            _ => ConfigError::yaml(file, e),
        })?;
        serde_yaml::from_str(text).map_err(|e| ConfigError::yaml(file, e))?
    };
    compile_raw(file, raw, usage_domains).map_err(|e| super::locate::at_rule_in(e, text))
}

/// How many YAML documents with content `text` holds (an empty one after a trailing `---`
/// does not count; a document that does not parse does).
fn documents(text: &str) -> usize {
    use serde::Deserialize;
    let mut n = 0;
    // Bounded: after an error serde_yaml's document iterator may never end.
    for doc in serde_yaml::Deserializer::from_str(text).take(1000) {
        match serde_yaml::Value::deserialize(doc) {
            Ok(serde_yaml::Value::Null) => {}
            Ok(_) => n += 1,
            Err(_) => return n + 1,
        }
    }
    n
}

/// Validates and compiles one domain as read: from a YAML file, or from an xDS resource
/// turned into the same shape (`super::xds`), so both sources compile one way.
pub(super) fn compile_raw(
    file: &str,
    raw: RawFile,
    usage_domains: &UsageDomains,
) -> Result<Domain, ConfigError> {
    let err = |problem: ConfigProblem| ConfigError::new(file, None, problem);
    let domain = match raw.domain {
        Some(d) if !d.is_empty() => d,
        _ => return Err(err(ConfigProblem::EmptyDomain)),
    };
    if raw.max_hits == Some(0) {
        return Err(err(ConfigProblem::ZeroMaxHits(domain)));
    }
    let default_estimate = raw.reservations.and_then(|r| r.default_estimate);
    if default_estimate == Some(0) {
        return Err(err(ConfigProblem::ZeroDefaultEstimate(domain)));
    }
    let usage = usage_domains.matches(&domain);
    let prices = match raw.prices {
        None => None,
        Some(p) => Some(compile_prices(p).map_err(|problem| {
            err(ConfigProblem::Prices {
                domain: domain.clone(),
                problem,
            })
        })?),
    };
    let mut root = Level::default();
    for rule in raw.descriptors.unwrap_or_default() {
        compile_rule(&domain, rule, &mut root, usage, prices.is_some())
            .map_err(|e| err(e.into()))?;
    }
    Ok(Domain {
        name: domain,
        root,
        policy: DomainPolicy {
            disabled: raw.disabled,
            allow_overrides: raw.allow_overrides.unwrap_or(true),
            max_hits: raw.max_hits,
            usage,
            default_estimate,
        },
        prices,
    })
}

/// `prices:` as the plan reads it.
fn compile_prices(raw: RawPrices) -> Result<Prices, PricesError> {
    let kinds = |t: BTreeMap<String, Amount>| -> Table<u64> {
        t.into_iter().map(|(k, a)| (k, a.0)).collect()
    };
    if raw.per_million_tokens.is_empty() && raw.default.is_none() {
        return Err(PricesError::NoModels);
    }
    let models: Table<Table<u64>> = raw
        .per_million_tokens
        .into_iter()
        .map(|(m, t)| (m, kinds(t)))
        .collect();
    let default = raw.default.map(kinds);
    if let Some((model, _)) = models.iter().find(|(_, t)| t.is_empty()) {
        return Err(PricesError::ModelWithoutPrice(model.clone()));
    }
    if default.as_ref().is_some_and(|t| t.is_empty()) {
        return Err(PricesError::DefaultWithoutPrice);
    }
    let name = |k: Option<String>, d: &str| k.filter(|k| !k.is_empty()).unwrap_or(d.into());
    let prices = Prices {
        currency: name(raw.currency, "USD"),
        model_key: name(raw.model_key, "model"),
        kind_key: name(raw.kind_key, "kind"),
        models,
        default,
    };
    if prices.model_key == prices.kind_key {
        return Err(PricesError::SameKeys(prices.model_key));
    }
    Ok(prices)
}

/// Compiles one rule and its children into `level`; `usage`: the domain is a usage domain.
fn compile_rule(
    parent_key: &str,
    raw: RawRule,
    level: &mut Level,
    usage: bool,
    priced: bool,
) -> Result<(), RuleError> {
    let key = match raw.key {
        Some(k) if !k.is_empty() => k,
        _ => {
            return Err(RuleError::EmptyKey {
                parent: parent_key.to_string(),
            })
        }
    };
    let value = raw.value.unwrap_or_default();
    let full_key = if value.is_empty() {
        format!("{parent_key}.{key}")
    } else {
        format!("{parent_key}.{key}_{value}")
    };
    let at = |problem: LimitError| RuleError::Limit {
        full_key: full_key.clone(),
        problem,
    };
    let pattern = Pattern::parse(&value);
    if raw.share_threshold && !matches!(pattern, Pattern::Wildcard(_)) {
        return Err(RuleError::ShareThresholdNeedsWildcard(full_key));
    }

    let mut raw_limits: Vec<RawLimit> = raw.rate_limit.into_iter().map(|c| c.0).collect();
    raw_limits.extend(raw.rate_limits.unwrap_or_default().into_iter().map(|c| c.0));
    let mut limits = Vec::with_capacity(raw_limits.len());
    let mut unlimited = false;
    let mut unlimited_replaces = Vec::new();
    let mut suffixes = HashSet::new();
    let n_limits = raw_limits.len();
    for (i, mut rl) in raw_limits.into_iter().enumerate() {
        let replaces = compile_replaces(&rl).map_err(at)?;
        let raw_shares = rl.shares.take();
        let raw_fair = rl.fair_share.take();
        let raw_global = rl.global.take();
        if rl.unlimited {
            if rl.unit.as_deref().is_some_and(|u| !u.is_empty()) {
                return Err(RuleError::UnlimitedWithUnit(full_key));
            }
            if n_limits > 1 {
                return Err(RuleError::UnlimitedWithOthers(full_key));
            }
            unlimited = true;
            unlimited_replaces = replaces;
            continue;
        }
        let mut limit = compile_limit(rl, replaces, usage, priced).map_err(at)?;
        if limit.metric_label.is_empty() {
            limit.metric_label = full_key.clone();
        }
        if !suffixes.insert(limit.key_suffix.clone()) {
            limit.key_suffix.push_str(&format!("#{i}"));
            suffixes.insert(limit.key_suffix.clone());
        }
        if let Some(raw_shares) = raw_shares {
            if limit.params.overdraft {
                // A usage domain's limits are overdraft ones.
                return Err(at(LimitError::SharesWith("overdraft")));
            }
            limit.shares = Some(Arc::new(compile_shares(&limit, raw_shares)));
        }
        if let Some(raw_global) = raw_global {
            if limit.params.overdraft {
                return Err(at(LimitError::GlobalWith("overdraft")));
            }
            let id = format!("{full_key}|{}", limit.key_suffix);
            limit.global = Some(Arc::new(compile_global(raw_global, id)));
        }
        if let Some(raw_fair) = raw_fair {
            if limit.params.overdraft {
                return Err(at(LimitError::FairShareWith("overdraft")));
            }
            limit.fair_share = Some(Arc::new(compile_fair_share(&limit, raw_fair)));
        }
        limits.push(Arc::new(limit));
    }
    if limits.iter().filter(|l| l.shared).count() > 1 && limits.iter().any(|l| l.lease > 0) {
        return Err(RuleError::LeaseWithSeveralShared(full_key));
    }
    let metadata = match raw.metadata {
        None => None,
        Some(m) => match serde_json::to_value(&m) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            _ => return Err(RuleError::Metadata(full_key)),
        },
    };

    let mut children = Level::default();
    for child in raw.descriptors.unwrap_or_default() {
        compile_rule(&full_key, child, &mut children, usage, priced)?;
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
        stats: None,
        children,
    };
    Ok(level.insert(rule)?)
}

fn compile_replaces(rl: &RawLimit) -> Result<Vec<String>, LimitError> {
    let mut out = Vec::new();
    for r in rl.replaces.iter().flatten() {
        let name = r.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err(LimitError::EmptyReplaces);
        }
        if rl.name.as_deref() == Some(name.as_str()) {
            return Err(LimitError::ReplacesItself);
        }
        out.push(name);
    }
    Ok(out)
}

fn compile_limit(
    rl: RawLimit,
    replaces: Vec<String>,
    usage: bool,
    priced: bool,
) -> Result<Limit, LimitError> {
    let spend = rl.spend.map(|a| a.0);
    if spend.is_some() && !priced {
        return Err(LimitError::SpendWithoutPrices);
    }
    // A spend limit counts micro-units; Envoy's answer reports at most u32::MAX of them.
    let amount = spend.unwrap_or(u64::from(rl.requests_per_unit.unwrap_or(0)));
    let requests_per_unit = u32::try_from(amount).unwrap_or(u32::MAX);
    let algorithm = match rl.algorithm.as_deref() {
        None => Algorithm::FixedWindow,
        Some(a) => Algorithm::parse(a).ok_or_else(|| LimitError::Algorithm(a.to_string()))?,
    };
    let calendar = compile_calendar(&rl, algorithm)?;
    let unit_text = rl.unit.clone().unwrap_or_default();
    let unit = match (calendar, algorithm) {
        (Some(c), _) => calendar_unit(&rl, c)?,
        (None, Algorithm::Concurrency) => {
            check_concurrency(&rl, requests_per_unit)?;
            Unit::InFlight
        }
        (None, _) => Unit::parse(&unit_text).ok_or_else(|| LimitError::Unit(unit_text.clone()))?,
    };
    if rl.lease_ttl.is_some() && algorithm != Algorithm::Concurrency {
        return Err(LimitError::SlotHoldWithoutConcurrency);
    }
    let window_us = match (rl.window.as_deref(), algorithm) {
        (None, Algorithm::Concurrency) => match rl.lease_ttl.as_deref() {
            Some(t) => slot_hold_us(t)?,
            None => DEFAULT_SLOT_HOLD_US,
        },
        (None, _) => unit.seconds() * 1_000_000,
        (Some(w), _) => window_us(w)?,
    };
    let burst = match (rl.burst, algorithm) {
        (None, _) => amount,
        (Some(b), Algorithm::TokenBucket) if b > 0 => b,
        (Some(_), Algorithm::TokenBucket) => return Err(LimitError::ZeroBurst),
        (Some(_), _) => return Err(LimitError::BurstWithoutTokenBucket),
    };
    if algorithm == Algorithm::TokenBucket && amount == 0 {
        return Err(LimitError::TokenBucketWithoutLimit);
    }
    if algorithm == Algorithm::TokenBucket {
        check_token_bucket_size(burst, amount, window_us)?;
    }
    let params = LimitParams {
        algorithm,
        limit: amount,
        window_us,
        burst,
        overdraft: (rl.overdraft || usage) && algorithm != Algorithm::Concurrency,
        calendar,
        max_wait_us: match rl.max_wait.as_deref() {
            Some(w) => max_wait_us(w)?,
            None => 0,
        },
        borrow_until: 0,
        fair_floor: 0,
        fair_cap: 0,
        ends_at_us: 0,
    };
    if params.max_wait_us as u128 * params.limit as u128
        > crate::limit::DEBT_CAP_FACTOR as u128 * params.burst as u128 * params.window_us as u128
    {
        // Past this a bucket's debt would reach its usage cap, where charges stop landing.
        return Err(LimitError::MaxWaitTooLong {
            most: std::time::Duration::from_micros(
                (crate::limit::DEBT_CAP_FACTOR as u128
                    * params.burst as u128
                    * params.window_us as u128
                    / params.limit.max(1) as u128) as u64,
            ),
        });
    }
    if params.overdraft && params.max_wait_us > 0 {
        // A usage domain's limits are overdraft ones.
        return Err(LimitError::MaxWaitWithOverdraft);
    }
    if let Some(lease) = rl.lease {
        check_lease(lease, rl.shared, &params).map_err(|e| {
            if usage && !rl.overdraft {
                LimitError::LeaseInUsageDomain(e)
            } else {
                LimitError::Lease(e)
            }
        })?;
    }
    let mut limit = Limit::new(rl.name.unwrap_or_default(), unit, requests_per_unit, params);
    limit.shared = rl.shared;
    limit.lease = rl.lease.unwrap_or(0);
    limit.replaces = replaces;
    limit.key_suffix = default_key_suffix(&params);
    limit.spend = spend.is_some();
    Ok(limit)
}

/// A pool's shares (checked as the file was read, `raw::check_shares`): each class's counter
/// is a fixed window like the pool's, limited to the class's guarantee in units (rounded down),
/// borrowing up to `borrow_until` of the pool (rounded down).
fn compile_shares(pool: &Limit, raw: RawShares) -> Shares {
    let units = |f: f64| (f * pool.params.limit as f64).floor() as u64;
    let borrow_until = raw.borrow_until.unwrap_or(DEFAULT_BORROW_UNTIL);
    let classes: Vec<Class> = raw
        .classes
        .iter()
        .map(|(name, &fraction)| {
            let guarantee = units(fraction);
            let params = LimitParams {
                limit: guarantee,
                burst: guarantee,
                overdraft: false,
                max_wait_us: 0,
                // At least 1, which marks a class's counter: a pool of under 2 units lends
                // nothing past a guarantee anyway.
                borrow_until: units(borrow_until).max(1),
                ..pool.params
            };
            let mut limit = Limit::new(
                format!("{}/{name}", pool.name),
                pool.unit,
                u32::try_from(guarantee).unwrap_or(u32::MAX),
                params,
            );
            limit.shared = true;
            limit.spend = pool.spend;
            limit.key_suffix = format!("{}{CLASS_MARK}{name}", pool.key_suffix);
            limit.metric_label = format!("{}/{name}", pool.metric_label);
            Class {
                name: name.clone(),
                fraction,
                limit,
            }
        })
        .collect();
    Shares {
        default: classes
            .iter()
            .position(|c| c.name == raw.default)
            .unwrap_or(0),
        by: raw.by,
        classes,
        borrow_until,
    }
}

/// A pool's fair share (checked as the file was read, `pool::check_fair_share`): a tenant's
/// counter is a fixed window like the pool's, limited to the pool's limit (its share is worked
/// out as it is decided), free up to `above` of the pool (rounded down, at least 1); the active
/// tenants' count is a fixed window like the pool's, limited to `max_tenants`.
fn compile_fair_share(pool: &Limit, raw: RawFairShare) -> FairShare {
    let above = raw.above.unwrap_or(DEFAULT_ABOVE);
    let floor = raw.floor.unwrap_or(1);
    let max_tenants = raw.max_tenants.unwrap_or(DEFAULT_MAX_TENANTS);
    let part = |suffix: String, label: &str, params: LimitParams| {
        let mut limit = Limit::new(
            format!("{}{label}", pool.name),
            pool.unit,
            u32::try_from(params.limit).unwrap_or(u32::MAX),
            params,
        );
        limit.shared = true;
        limit.spend = pool.spend;
        limit.key_suffix = format!("{}{suffix}", pool.key_suffix);
        limit.metric_label = format!("{}{label}", pool.metric_label);
        limit
    };
    let tenant = part(
        TENANT_MARK.to_string(),
        "/tenant",
        LimitParams {
            overdraft: false,
            max_wait_us: 0,
            borrow_until: ((above * pool.params.limit as f64).floor() as u64).max(1),
            fair_floor: floor,
            fair_cap: 0,
            ends_at_us: 0,
            ..pool.params
        },
    );
    let active = part(
        ACTIVE_MARK.to_string(),
        "/active_tenants",
        LimitParams {
            limit: max_tenants,
            burst: max_tenants,
            overdraft: false,
            max_wait_us: 0,
            borrow_until: 0,
            fair_floor: 0,
            fair_cap: max_tenants,
            ..pool.params
        },
    );
    FairShare {
        by: raw.by,
        above,
        floor,
        max_tenants,
        tenant,
        active,
    }
}

/// `lease: N`: a shared fixed-window limit (whose leased units expire with the window they were
/// charged in), N from 1 to `requests_per_unit`.
fn check_lease(lease: u64, shared: bool, p: &LimitParams) -> Result<(), LeaseError> {
    if !shared {
        return Err(LeaseError::NotShared);
    }
    if p.algorithm != Algorithm::FixedWindow {
        return Err(LeaseError::NotFixedWindow);
    }
    if p.overdraft {
        return Err(LeaseError::Overdraft);
    }
    if lease == 0 || lease > p.limit {
        return Err(LeaseError::OutOfRange {
            lease,
            limit: p.limit,
        });
    }
    Ok(())
}

/// The Redis script computes a token bucket exactly with numbers below 2^53. Its largest
/// products are `units × limit` and `units × window / limit` for up to
/// `(1 + DEBT_CAP_FACTOR) × burst` units, which must stay below 2^52 (so that adding the time
/// since the epoch stays below 2^53).
fn check_token_bucket_size(burst: u64, limit: u64, window_us: u64) -> Result<(), LimitError> {
    let units = burst as u128 * (crate::limit::DEBT_CAP_FACTOR as u128 + 1);
    let widest = (limit as u128).max((window_us as u128).div_ceil(limit as u128));
    if units * widest >= 1u128 << 52 {
        return Err(LimitError::TokenBucketTooLarge {
            burst,
            limit,
            window: std::time::Duration::from_micros(window_us),
        });
    }
    Ok(())
}
