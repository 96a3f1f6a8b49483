//! The in-memory store: the embedded default for a single instance, and the reference the
//! Redis store is held to.
//!
//! Counters live in N shards, each a mutex around a hash map. A request locks only the
//! shards its keys fall in, in ascending order (so two requests can never deadlock), decides
//! with [`batch::evaluate`] and writes back what commits. Expired counters are dropped when
//! touched and by [`MemoryStore::sweep`], which the server runs periodically, so memory
//! stays bounded by the live keys.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::{ApplyMode, ChargeOutcome, Store, StoreError};
use crate::algorithm::batch::{self, BatchCharge, BatchMode, Counter};
use crate::algorithm::{expires_at, State};
use crate::clock::Clock;
use crate::limit::LimitParams;
use crate::plan::Plan;

const SHARDS: usize = 64;
/// Expired counters are swept at most this often (they are also dropped when touched).
const SWEEP_EVERY_US: u64 = 5_000_000;

struct Entry {
    state: State,
    expires_at: u64,
}

type Shard = HashMap<String, Entry>;

pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    last_sweep_us: AtomicU64,
}

impl MemoryStore {
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            clock,
            last_sweep_us: AtomicU64::new(0),
        }
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) as usize) % SHARDS
    }

    /// Drops every expired counter; returns how many remain.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now_us();
        self.shards
            .iter()
            .map(|s| {
                let mut s = s.lock();
                s.retain(|_, e| e.expires_at > now);
                s.len()
            })
            .sum()
    }

    fn apply_now(&self, plan: &Plan<'_>, mode: ApplyMode) -> Vec<ChargeOutcome> {
        let now = self.clock.now_us();
        let charges = &plan.charges;
        // Distinct keys become counters; a request has few charges, so linear search is fine.
        let mut keys: Vec<(&str, usize, LimitParams)> = Vec::with_capacity(charges.len());
        let mut batch = Vec::with_capacity(charges.len());
        for c in charges {
            let counter = match keys.iter().position(|(k, _, _)| *k == c.key) {
                Some(i) => i,
                None => {
                    keys.push((&c.key, self.shard_of(&c.key), c.limit.params));
                    keys.len() - 1
                }
            };
            batch.push(BatchCharge {
                counter,
                params: c.limit.params,
                cost: c.cost,
                role: c.role,
            });
        }
        let mut order: Vec<usize> = keys.iter().map(|&(_, shard, _)| shard).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> =
            order.iter().map(|&s| self.shards[s].lock()).collect();
        let guard_of = |shard: usize| order.binary_search(&shard).unwrap_or_default();

        let mut counters: Vec<Counter> = keys
            .iter()
            .map(|&(key, shard, params)| {
                let loaded = guards[guard_of(shard)]
                    .get(key)
                    .filter(|e| e.expires_at > now)
                    .map(|e| e.state.clone());
                Counter::new(loaded, &params, now)
            })
            .collect();
        let batch_mode = BatchMode {
            count_rejected: mode.count_rejected,
            dry_run: false,
        };
        let evaluated = batch::evaluate(
            &mut counters,
            &batch,
            now,
            batch_mode,
            plan.quota_descriptors,
        );
        for (counter, &(key, shard, params)) in counters.into_iter().zip(&keys) {
            if !counter.commit {
                continue;
            }
            let map = &mut guards[guard_of(shard)];
            match counter.after {
                None => {
                    map.remove(key);
                }
                Some(state) => {
                    let entry = Entry {
                        expires_at: expires_at(&state, &params),
                        state,
                    };
                    match map.get_mut(key) {
                        Some(e) => *e = entry,
                        None => {
                            map.insert(key.to_string(), entry);
                        }
                    }
                }
            }
        }
        evaluated.outcomes
    }
}

impl Store for MemoryStore {
    async fn apply(
        &self,
        plan: &Plan<'_>,
        mode: ApplyMode,
    ) -> Result<Vec<ChargeOutcome>, StoreError> {
        Ok(self.apply_now(plan, mode))
    }

    async fn maintain(&self) {
        let now = self.clock.now_us();
        let last = self.last_sweep_us.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= SWEEP_EVERY_US {
            self.last_sweep_us.store(now, Ordering::Relaxed);
            self.sweep();
        }
    }
}
