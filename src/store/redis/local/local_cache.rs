//! The local over-limit cache: limits known to be exhausted until a time, so a Redis store
//! can deny without a round trip until then (the deny path of a hot, exhausted key).
//!
//! Entries are keyed by the counter key and checked against the limit's parameters, so a
//! changed limit or a request override never reads a stale entry. A cached denial is re-checked
//! with the store at least every [`RECHECK_US`]: it can rest on another request's charge that is
//! about to be refunded, and must not outlive it by a whole window. Bounded and cheap under
//! a flood of distinct exhausted keys: the entries live in a [`quick_cache`] cache, which
//! evicts on insert (S3-FIFO) once it holds about its capacity.
//!
//! Why the crate and not our own sharded map: it is faster on every request's lookup. With
//! 100,000 entries and 44-byte keys (`cargo bench --bench local_cache -- --warm-up-time 1
//! --measurement-time 3`, BENCHMARKS.md), a miss took 31 ns against 52 ns for the 16 mutexed
//! `HashMap` + FIFO-queue shards this module held before, a hit 59 ns against 73 ns, and an
//! insert that evicts 295 ns against 357 ns, both keyed with SipHash.

use std::collections::hash_map::RandomState;

use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::UnitWeighter;

use crate::algorithm::check_cost;
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Role;
use crate::limit::{Algorithm, LimitParams};
use crate::store::placement::{Placed, PlacedCharge};

/// Longest time a cached denial is trusted without asking the store again.
pub const RECHECK_US: u64 = 1_000_000;

/// Keys hash with the standard library's SipHash, randomly keyed: they carry request values,
/// so a flood of chosen keys must not collide (quick_cache's default hasher is faster and
/// weaker).
type Entries = Cache<String, (LimitParams, u64, u64), UnitWeighter, RandomState>;

pub struct LocalCache {
    /// key → (parameters, re-check with the store after, exhausted until); `None` when the
    /// capacity is 0 (the cache is disabled).
    entries: Option<Entries>,
}

/// What the cache knows about a request.
#[derive(Debug, PartialEq)]
pub enum Lookup {
    /// Nothing.
    Miss,
    /// Every charge is an enforced limit known exhausted: the request is denied, and these
    /// are its outcomes.
    AllExhausted(Vec<ChargeOutcome>),
    /// Some enforced limit is known exhausted: the request is very likely denied, so it is
    /// worth evaluating without charging first.
    SomeExhausted,
}

/// Only enforced, non-overdraft limits may deny from the cache, and none that may wait
/// (`max_wait`): a request that could be held until it fits is never refused from here. Nor
/// a class of a pool's shares, whose room depends on the pool's use.
fn cacheable(s: &PlacedCharge<'_>) -> bool {
    // A release frees concurrency slots at any time: a denial says nothing about the next call.
    s.role == Role::Enforced
        && !s.params.overdraft
        && s.params.max_wait_us == 0
        && !s.params.is_pool_part()
        // A global limit's lease grows as grants come: a denial says nothing about the next.
        && s.params.ends_at_us == 0
        && s.params.algorithm != crate::limit::Algorithm::Concurrency
}

/// What a retry of the request needs on `spec`'s counter: its charges there, all unlanded.
fn need(placed: &Placed<'_>, spec: &PlacedCharge<'_>) -> u64 {
    let on_key = placed.charges.iter().filter(|s| s.key == spec.key);
    on_key
        .map(|s| s.cost)
        .sum::<u64>()
        .max(check_cost(&spec.params, spec.cost, false))
}

/// A cached "exhausted until T" is "one unit fits at T"; it answers for a cost of more than
/// one only on a fixed window, where everything fits again when the window ends.
fn answers_for(spec: &PlacedCharge<'_>, need: u64) -> bool {
    spec.params.algorithm == Algorithm::FixedWindow || need == 1
}

impl LocalCache {
    pub fn new(capacity: usize) -> LocalCache {
        LocalCache {
            entries: (capacity > 0).then(|| {
                Cache::with(
                    capacity,
                    capacity as u64,
                    UnitWeighter,
                    RandomState::new(),
                    DefaultLifecycle::default(),
                )
            }),
        }
    }

    pub fn enabled(&self) -> bool {
        self.entries.is_some()
    }

    /// What the cache knows about `placed` at `now`.
    pub fn lookup(&self, placed: &Placed<'_>, now: u64) -> Lookup {
        if !self.enabled() {
            return Lookup::Miss;
        }
        // Made only while every charge so far is known exhausted: a miss allocates nothing.
        let mut outcomes = Vec::new();
        let mut all = true;
        let mut any = false;
        for spec in &placed.charges {
            let need = need(placed, spec);
            let until = (cacheable(spec) && answers_for(spec, need))
                .then(|| self.exhausted_until(&spec.key, &spec.params, now))
                .flatten();
            match until {
                Some(t) => {
                    any = true;
                    if all {
                        outcomes.push(ChargeOutcome {
                            allowed: false,
                            remaining: 0,
                            wait_us: (need <= spec.params.capacity()).then_some(t - now),
                        });
                    }
                }
                None => all = false,
            }
        }
        match (any, all) {
            (true, true) => Lookup::AllExhausted(outcomes),
            (true, false) => Lookup::SomeExhausted,
            (false, _) => Lookup::Miss,
        }
    }

    /// Remembers the limits a store answer showed exhausted: nothing left, and the wait is
    /// when one unit fits.
    pub fn remember(&self, placed: &Placed<'_>, outcomes: &[ChargeOutcome], now: u64) {
        if !self.enabled() {
            return;
        }
        for (spec, o) in placed.charges.iter().zip(outcomes) {
            let exhausted = !o.allowed && o.remaining == 0 && cacheable(spec);
            if exhausted && answers_for(spec, need(placed, spec)) {
                if let Some(w) = o.wait_us.filter(|&w| w > 0) {
                    self.insert(&spec.key, &spec.params, now + RECHECK_US, now + w);
                }
            }
        }
    }

    /// `Some(until)` when `key` with these parameters is known exhausted until then, and the
    /// entry is not yet due for a re-check.
    #[doc(hidden)] // `pub` for benches/local_cache.rs.
    pub fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        match self.entries.as_ref()?.get(key) {
            Some((p, recheck, until)) if p == *params && recheck > now => Some(until),
            _ => None,
        }
    }

    /// Remembers `key` exhausted until `until`, trusted without the store until `recheck`.
    #[doc(hidden)] // `pub` for benches/local_cache.rs.
    pub fn insert(&self, key: &str, params: &LimitParams, recheck: u64, until: u64) {
        if let Some(entries) = &self.entries {
            entries.insert(key.to_string(), (*params, recheck.min(until), until));
        }
    }

    /// Drops entries due for a re-check.
    /// Forgets what it knew of `key` (an operator reset it).
    pub fn forget(&self, key: &str) {
        if let Some(entries) = &self.entries {
            entries.remove(key);
        }
    }

    pub fn sweep(&self, now: u64) {
        if let Some(entries) = &self.entries {
            entries.retain(|_, (_, r, _)| *r > now);
        }
    }

    /// Entries held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.as_ref().map_or(0, |e| e.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Algorithm;

    fn p() -> LimitParams {
        LimitParams {
            algorithm: Algorithm::FixedWindow,
            limit: 1,
            window_us: 60_000_000,
            burst: 1,
            overdraft: false,
            calendar: None,
            max_wait_us: 0,
            borrow_until: 0,
            fair_floor: 0,
            fair_cap: 0,
            ends_at_us: 0,
        }
    }

    #[test]
    fn a_full_cache_drops_entries_and_stays_bounded() {
        let cache = LocalCache::new(64);
        for i in 0..10_000 {
            cache.insert(&format!("k{i}"), &p(), 100, 200);
        }
        assert!(cache.len() <= 64, "{}", cache.len());
        // The newest is kept (which older ones stay is quick_cache's choice).
        assert_eq!(cache.exhausted_until("k9999", &p(), 50), Some(200));
        // Other parameters: not an answer.
        let other = LimitParams { limit: 2, ..p() };
        assert_eq!(cache.exhausted_until("k9999", &other, 50), None);
        // Due for a re-check: not trusted, and swept.
        assert_eq!(cache.exhausted_until("k9999", &p(), 100), None);
        cache.sweep(100);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_zero_capacity_disables_the_cache() {
        let cache = LocalCache::new(0);
        assert!(!cache.enabled());
        cache.insert("k", &p(), 100, 200);
        assert_eq!(cache.exhausted_until("k", &p(), 50), None);
    }
}
