//! The in-memory store: the embedded default for a single instance.
//!
//! Counters live in N shards, each a mutex around a hash map. A request locks the shards its
//! keys fall in, in ascending order (so two requests can never deadlock), and holds them while
//! it follows the decision [`protocol`](super::protocol) — the same group-by-group steps the
//! Redis store takes, here one [`batch`] per placement group — so it is atomic and answers what
//! Redis answers. Expired counters are dropped when touched and by [`MemoryStore::sweep`],
//! which the server runs periodically, so memory stays bounded by the live keys.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::placement::{place, Placed};
use super::protocol::{GroupAnswer, Mode, Next, Protocol, Undo};
use super::{ApplyMode, ChargeOutcome, Store, StoreError};
use crate::algorithm::batch::{self, BatchCharge, BatchMode, Counter};
use crate::algorithm::{expires_at, refresh, refund, Landing, State};
use crate::clock::Clock;
use crate::metrics::Metrics;
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
    metrics: Arc<Metrics>,
}

impl Store for MemoryStore {
    async fn apply(
        &self,
        plan: &Plan<'_>,
        mode: ApplyMode,
    ) -> Result<Vec<ChargeOutcome>, StoreError> {
        Ok(self.apply_now(plan, mode))
    }

    fn name(&self) -> &'static str {
        "memory"
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

/// The shards one request holds, and where its keys live.
struct Locked<'s> {
    /// Shard indexes, ascending, each once.
    order: Vec<usize>,
    guards: Vec<MutexGuard<'s, Shard>>,
    /// Per spec, its shard.
    shard_of: Vec<usize>,
}

impl Locked<'_> {
    fn map(&mut self, spec: usize) -> &mut Shard {
        let shard = self.shard_of[spec];
        let i = self.order.binary_search(&shard).unwrap_or_default();
        &mut self.guards[i]
    }

    fn load(&mut self, spec: usize, key: &str, now: u64) -> Option<State> {
        self.map(spec)
            .get(key)
            .filter(|e| e.expires_at > now)
            .map(|e| e.state.clone())
    }

    fn store(
        &mut self,
        spec: usize,
        key: &str,
        state: Option<State>,
        p: &crate::limit::LimitParams,
    ) {
        let map = self.map(spec);
        match state {
            None => {
                map.remove(key);
            }
            Some(state) => {
                let entry = Entry {
                    expires_at: expires_at(&state, p),
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
}

impl MemoryStore {
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            clock,
            last_sweep_us: AtomicU64::new(0),
            metrics: Arc::default(),
        }
    }

    /// Counts into `metrics` (take-backs).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> MemoryStore {
        self.metrics = metrics;
        self
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
        let placed = place(plan, "");
        let shard_of: Vec<usize> = placed.specs.iter().map(|s| self.shard_of(&s.key)).collect();
        let mut order = shard_of.clone();
        order.sort_unstable();
        order.dedup();
        let guards = order.iter().map(|&s| self.shards[s].lock()).collect();
        let mut locked = Locked {
            order,
            guards,
            shard_of,
        };
        let mut protocol = Protocol::new(&placed, mode.count_rejected);
        loop {
            match protocol.step() {
                Next::Run(runs) => {
                    for (gi, m) in runs {
                        let answer = run_group(&mut locked, &placed, gi, m, now);
                        protocol.record(gi, answer);
                    }
                }
                Next::TakeBack(undos) => {
                    self.metrics.refunds.inc_by(undos.len() as u64);
                    for (gi, undo) in undos {
                        let answer = take_back(&mut locked, &placed, gi, &undo, now, mode);
                        protocol.record(gi, answer);
                    }
                }
                Next::Done => return protocol.into_outcomes(),
            }
        }
    }
}

/// The group's distinct keys (as spec indexes) and its charges as a batch over them.
fn group_batch<'p>(placed: &'p Placed<'_>, gi: usize) -> (&'p [usize], Vec<BatchCharge>) {
    let g = &placed.groups[gi];
    let charges = g
        .charges
        .iter()
        .zip(&g.key_of)
        .map(|(&ci, &k)| {
            let s = &placed.specs[ci];
            BatchCharge {
                counter: k,
                params: s.params,
                cost: s.cost,
                role: s.role,
            }
        })
        .collect();
    (&g.keys, charges)
}

/// Decides one placement group and writes back what it commits.
fn run_group(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    mode: Mode,
    now: u64,
) -> GroupAnswer {
    let (keys, charges) = group_batch(placed, gi);
    let mut counters: Vec<Counter> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.specs[s];
            Counter::new(locked.load(s, &spec.key, now), &spec.params, now)
        })
        .collect();
    let batch_mode = BatchMode {
        count_rejected: mode == Mode::CountRejected,
        dry_run: mode == Mode::DryRun,
    };
    let quota = placed.quota_descriptors;
    let (evaluated, outcomes) =
        batch::evaluate_and_report(&mut counters, &charges, now, batch_mode, quota);
    for (counter, &s) in counters.into_iter().zip(keys) {
        if counter.commit {
            let spec = &placed.specs[s];
            locked.store(s, &spec.key, counter.after, &spec.params);
        }
    }
    outcomes.into_iter().zip(evaluated.landings).collect()
}

/// Takes back what `undo` says in one group, writes the counters back and answers as things
/// stand.
fn take_back(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    undo: &[Undo],
    now: u64,
    mode: ApplyMode,
) -> GroupAnswer {
    let (keys, charges) = group_batch(placed, gi);
    let mut states: Vec<Option<State>> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.specs[s];
            let mut state = locked.load(s, &spec.key, now);
            refresh(&mut state, &spec.params, now);
            state
        })
        .collect();
    for (c, u) in charges.iter().zip(undo) {
        if u.take_back {
            let s = keys[c.counter];
            let state = &mut states[c.counter];
            refund(state, &c.params, u.landing, now);
            let spec = &placed.specs[s];
            locked.store(s, &spec.key, state.clone(), &spec.params);
        }
    }
    let allowed: Vec<bool> = undo.iter().map(|u| u.allowed).collect();
    let landings: Vec<Landing> = undo.iter().map(Undo::kept).collect();
    let finals: Vec<&Option<State>> = states.iter().collect();
    let outcomes = batch::report(
        &finals,
        &charges,
        &allowed,
        &landings,
        now,
        mode.count_rejected,
    );
    outcomes.into_iter().zip(landings).collect()
}
