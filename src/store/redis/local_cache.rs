//! The local over-limit cache: limits known to be exhausted until a time, so a Redis store
//! can deny without a round trip until then (the deny path of a hot, exhausted key).
//!
//! Entries are keyed by the counter key and checked against the limit's parameters, so a
//! changed limit or a request override never reads a stale entry. A cached denial is re-checked
//! with the store at least every [`RECHECK_US`]: it can rest on another request's charge that is
//! about to be refunded, and must not outlive it by a whole window. Bounded and cheap under
//! a flood of distinct exhausted keys: entries live in shards, each a map plus its keys in
//! insertion order; a full shard drops its oldest entries first, O(1) amortised per insert.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use parking_lot::Mutex;

use crate::algorithm::check_cost;
use crate::decision::ChargeOutcome;
use crate::limit::{Algorithm, LimitParams};
use crate::plan::Role;
use crate::store::placement::{Placed, PlacedCharge};

/// Longest time a cached denial is trusted without asking the store again.
pub const RECHECK_US: u64 = 1_000_000;

const SHARDS: usize = 16;

pub struct LocalCache {
    /// Entries per shard; 0 disables the cache.
    per_shard: usize,
    shards: Box<[Mutex<CacheShard>]>,
    hasher: RandomState,
}

#[derive(Default)]
struct CacheShard {
    /// key → (parameters, re-check with the store after, exhausted until).
    entries: HashMap<String, (LimitParams, u64, u64)>,
    /// Keys in insertion order (a key re-inserted appears again; stale ones are skipped).
    order: VecDeque<String>,
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

/// Only enforced, non-overdraft limits may deny from the cache.
fn cacheable(s: &PlacedCharge<'_>) -> bool {
    s.role == Role::Enforced && !s.params.overdraft
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
            per_shard: capacity.div_ceil(SHARDS),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(CacheShard::default()))
                .collect(),
            hasher: RandomState::new(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.per_shard > 0
    }

    fn shard(&self, key: &str) -> &Mutex<CacheShard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// What the cache knows about `placed` at `now`.
    pub fn lookup(&self, placed: &Placed<'_>, now: u64) -> Lookup {
        if !self.enabled() {
            return Lookup::Miss;
        }
        let mut outcomes = Vec::with_capacity(placed.charges.len());
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
                    outcomes.push(ChargeOutcome {
                        allowed: false,
                        remaining: 0,
                        wait_us: (need <= spec.params.capacity()).then_some(t - now),
                    });
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
    fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        let shard = self.shard(key).lock();
        match shard.entries.get(key) {
            Some((p, recheck, until)) if p == params && *recheck > now => Some(*until),
            _ => None,
        }
    }

    /// Remembers `key` exhausted until `until`, trusted without the store until `recheck`.
    fn insert(&self, key: &str, params: &LimitParams, recheck: u64, until: u64) {
        let mut shard = self.shard(key).lock();
        let shard = &mut *shard;
        let value = (*params, recheck.min(until), until);
        if let Some(entry) = shard.entries.get_mut(key) {
            *entry = value;
            return;
        }
        while shard.entries.len() >= self.per_shard {
            match shard.order.pop_front() {
                Some(oldest) => {
                    shard.entries.remove(&oldest);
                }
                None => break,
            }
        }
        shard.entries.insert(key.to_string(), value);
        shard.order.push_back(key.to_string());
        // Re-inserted keys leave stale copies behind; rebuilding now and then keeps the
        // queue's length bounded (amortised O(1)).
        if shard.order.len() > 2 * self.per_shard {
            let live = &shard.entries;
            shard.order.retain(|k| live.contains_key(k));
        }
    }

    /// Drops entries due for a re-check.
    pub fn sweep(&self, now: u64) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let shard = &mut *shard;
            shard.entries.retain(|_, (_, r, _)| *r > now);
            let live = &shard.entries;
            shard.order.retain(|k| live.contains_key(k));
        }
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
        }
    }

    #[test]
    fn a_full_cache_drops_its_oldest_entries_and_stays_bounded() {
        let cache = LocalCache::new(SHARDS * 4);
        for i in 0..10_000 {
            cache.insert(&format!("k{i}"), &p(), 100, 200);
        }
        let held: usize = cache.shards.iter().map(|s| s.lock().entries.len()).sum();
        assert!(held <= SHARDS * 4, "{held}");
        let queued: usize = cache.shards.iter().map(|s| s.lock().order.len()).sum();
        assert!(queued <= SHARDS * 8 + SHARDS, "{queued}");
        // The newest are kept.
        assert_eq!(cache.exhausted_until("k9999", &p(), 50), Some(200));
        assert_eq!(cache.exhausted_until("k0", &p(), 50), None);
        // Due for a re-check: not trusted, and swept.
        assert_eq!(cache.exhausted_until("k9999", &p(), 100), None);
        cache.sweep(100);
        let held: usize = cache.shards.iter().map(|s| s.lock().entries.len()).sum();
        assert_eq!(held, 0);
    }
}
