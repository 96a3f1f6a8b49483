//! The local over-limit cache: limits known to be exhausted until a time, so a Redis store
//! can deny without a round trip until then (the deny path of a hot, exhausted key).
//!
//! Entries are keyed by the counter key and checked against the limit's parameters, so a
//! changed limit or a request override never reads a stale entry. A cached denial is re-checked
//! with the store at least every [`RECHECK_US`]: it can rest on another request's charge that a
//! refund is about to undo, and must not outlive it by a whole window. Bounded: when full,
//! expired entries are dropped, and if none are, the new entry is not kept.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::decision::ChargeOutcome;
use crate::limit::{Algorithm, LimitParams};
use crate::plan::{Charge, Role};

/// Longest time a cached denial is trusted without asking the store again.
pub const RECHECK_US: u64 = 1_000_000;

pub struct LocalCache {
    capacity: usize,
    /// key → (parameters, re-check with the store after, exhausted until).
    entries: Mutex<HashMap<String, (LimitParams, u64, u64)>>,
}

/// Only enforced, non-overdraft limits may deny from the cache.
fn cacheable(c: &Charge<'_>) -> bool {
    c.role == Role::Enforced && !c.limit.params.overdraft
}

impl LocalCache {
    pub fn new(capacity: usize) -> LocalCache {
        LocalCache {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Answers a request from the cache when one of its enforced limits is known exhausted:
    /// the request is then denied and charges nothing. `None`: ask the store.
    pub fn deny(&self, charges: &[Charge<'_>], now: u64) -> Option<Vec<ChargeOutcome>> {
        if !self.enabled() {
            return None;
        }
        let mut hit = false;
        let outcomes = charges
            .iter()
            .map(|c| {
                let until = cacheable(c)
                    .then(|| self.exhausted_until(&c.key, &c.limit.params, now))
                    .flatten();
                match until {
                    Some(t) => {
                        hit = true;
                        ChargeOutcome {
                            allowed: false,
                            remaining: 0,
                            wait_us: Some(t - now),
                        }
                    }
                    // Not evaluated: the request is denied anyway.
                    None => ChargeOutcome {
                        allowed: true,
                        remaining: 0,
                        wait_us: None,
                    },
                }
            })
            .collect();
        hit.then_some(outcomes)
    }

    /// Remembers the limits a store answer showed exhausted for any cost: nothing left, and
    /// the wait is until one unit fits.
    pub fn remember(&self, charges: &[Charge<'_>], outcomes: &[ChargeOutcome], now: u64) {
        if !self.enabled() {
            return;
        }
        for (c, o) in charges.iter().zip(outcomes) {
            let p = &c.limit.params;
            let wait_fits_one = p.algorithm == Algorithm::FixedWindow || c.cost <= 1;
            if !o.allowed && o.remaining == 0 && cacheable(c) && wait_fits_one {
                if let Some(w) = o.wait_us.filter(|&w| w > 0) {
                    self.insert(&c.key, p, now, now + RECHECK_US, now + w);
                }
            }
        }
    }

    /// `Some(until)` when `key` with these parameters is known exhausted until then, and the
    /// entry is not yet due for a re-check.
    fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        let entries = self.entries.lock();
        match entries.get(key) {
            Some((p, recheck, until)) if p == params && *recheck > now => Some(*until),
            _ => None,
        }
    }

    /// Remembers `key` exhausted until `until`, trusted without the store until `recheck`.
    fn insert(&self, key: &str, params: &LimitParams, now: u64, recheck: u64, until: u64) {
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            entries.retain(|_, (_, r, _)| *r > now);
            if entries.len() >= self.capacity {
                return;
            }
        }
        entries.insert(key.to_string(), (*params, recheck.min(until), until));
    }

    pub fn sweep(&self, now: u64) {
        self.entries.lock().retain(|_, (_, r, _)| *r > now);
    }
}
