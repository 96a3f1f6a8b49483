//! A shared pool's divisions as written and checked as the file is read: guaranteed shares by
//! class (`shares:`) and a fair share among active tenants (`fair_share:`). Both live on a
//! `shared: true` fixed window without `lease` or `overdraft`, whose counter is the pool;
//! `super::compile` turns them into counters beside it (`limit::Shares`, `limit::FairShare`).

use serde::Deserialize;

use crate::config::error::LimitError;
use crate::limit::Algorithm;

/// `shares:` as written: the class entry, each class's guaranteed fraction, the default class
/// and up to what use of the pool a class past its guarantee may borrow (default 0.8).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShares {
    pub by: String,
    pub classes: std::collections::BTreeMap<String, f64>,
    pub default: String,
    #[serde(default)]
    pub borrow_until: Option<f64>,
}

/// `borrow_until` when none is written.
pub const DEFAULT_BORROW_UNTIL: f64 = 0.8;

/// `fair_share:` as written: the tenant entry, the pool's use above which a tenant is held to
/// its share (default 0.3), the floor of a share in units (default 1), and the most tenants the
/// share divides by (default 10,000).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFairShare {
    pub by: String,
    #[serde(default)]
    pub above: Option<f64>,
    #[serde(default)]
    pub floor: Option<u64>,
    #[serde(default)]
    pub max_tenants: Option<u64>,
}

/// `above` when none is written: low enough that one tenant sending 10 times as much as 9
/// others takes no more than its share of the pool before the share applies (docs/configuration.md,
/// "Sharing a pool").
pub const DEFAULT_ABOVE: f64 = 0.3;
/// `max_tenants` when none is written, and the most that may be.
pub const DEFAULT_MAX_TENANTS: u64 = 10_000;
pub const MAX_TENANTS: u64 = 1_000_000;

/// What the pool's limit says about itself.
#[derive(Debug, Clone, Copy)]
pub struct Pool {
    pub shared: bool,
    pub algorithm: Algorithm,
    pub lease: bool,
    pub overdraft: bool,
}

impl Pool {
    /// `lease` or `overdraft`, if the limit has either.
    fn with(&self) -> Option<&'static str> {
        if self.lease {
            Some("lease")
        } else if self.overdraft {
            Some("overdraft")
        } else {
            None
        }
    }
}

/// `shares:`: on a `shared: true` fixed window without `lease` or `overdraft`; class names fit
/// in a key; fractions above 0 and summing to at most 1; the default one of the classes.
pub fn check_shares(pool: Pool, s: &RawShares) -> Result<(), LimitError> {
    if !pool.shared {
        return Err(LimitError::SharesNotShared);
    }
    if pool.algorithm != Algorithm::FixedWindow {
        return Err(LimitError::SharesAlgorithm(pool.algorithm.name()));
    }
    if let Some(with) = pool.with() {
        return Err(LimitError::SharesWith(with));
    }
    if s.by.is_empty() || s.classes.is_empty() {
        return Err(LimitError::SharesEmpty);
    }
    for (name, &f) in &s.classes {
        if !crate::limit::valid_class_name(name) {
            return Err(LimitError::SharesClassName(name.clone()));
        }
        if !(f > 0.0 && f <= 1.0) {
            return Err(LimitError::SharesFraction(name.clone(), f.to_string()));
        }
    }
    let sum: f64 = s.classes.values().sum();
    if sum > 1.0 + 1e-9 {
        return Err(LimitError::SharesSum(format!("{sum:.4}")));
    }
    if !s.classes.contains_key(&s.default) {
        return Err(LimitError::SharesDefault(s.default.clone()));
    }
    if let Some(b) = s.borrow_until {
        if !(b > 0.0 && b <= 1.0) {
            return Err(LimitError::SharesBorrowUntil(b.to_string()));
        }
    }
    Ok(())
}

/// `fair_share:`: on a `shared: true` fixed window without `lease` or `overdraft`; an entry
/// to name tenants by; `above` above 0 and at most 1; a floor of at least 1; `max_tenants`
/// from 1 to [`MAX_TENANTS`].
pub fn check_fair_share(pool: Pool, f: &RawFairShare) -> Result<(), LimitError> {
    if !pool.shared {
        return Err(LimitError::FairShareNotShared);
    }
    if pool.algorithm != Algorithm::FixedWindow {
        return Err(LimitError::FairShareAlgorithm(pool.algorithm.name()));
    }
    if let Some(with) = pool.with() {
        return Err(LimitError::FairShareWith(with));
    }
    if f.by.is_empty() {
        return Err(LimitError::FairShareBy);
    }
    if let Some(a) = f.above {
        if !(a > 0.0 && a <= 1.0) {
            return Err(LimitError::FairShareAbove(a.to_string()));
        }
    }
    if f.floor == Some(0) {
        return Err(LimitError::FairShareFloor);
    }
    if let Some(m) = f.max_tenants {
        if !(1..=MAX_TENANTS).contains(&m) {
            return Err(LimitError::FairShareMaxTenants(m));
        }
    }
    Ok(())
}
