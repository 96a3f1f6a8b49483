//! The in-memory store: the embedded default for a single instance.
//!
//! Counters live in N shards, each a mutex around a hash map. A request locks the shards its
//! keys fall in, in ascending order (so two requests can never deadlock), and holds them while
//! it follows the decision [`protocol`](super::protocol) — the same group-by-group steps the
//! Redis store takes, here one [`batch`] per placement group — so it is atomic and answers what
//! Redis answers. Expired counters are dropped when touched and by [`MemoryStore::sweep`],
//! which the server runs periodically.
//!
//! Memory is bounded (`--max-store-bytes`, split evenly across the shards): when a shard goes
//! over its share, its expired counters go first, then the live ones closest to expiry, down
//! to 90% of the share. Evicting a live counter forgets its usage (that key may then be
//! over-admitted); each one is counted in `tollgate_memory_evictions_total`.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::placement::{place, record_key, record_life_us, Layout, Placed};
use super::protocol::{GroupAnswer, Next, Protocol, Refund};
use super::{CounterReading, Store};
use crate::algorithm::batch::{self, BatchCharge, Counter};
use crate::algorithm::reservation::{self, Reserved};
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::algorithm::{expires_at, inspect, refresh, refund, Landing, State};
use crate::base::clock::Clock;
use crate::limit::{Algorithm, LimitParams};
use crate::plan::Plan;
use crate::store::error::StoreError;
use crate::telemetry::metrics::Metrics;

const SHARDS: usize = 64;
/// Expired counters are swept at most this often (they are also dropped when touched).
const SWEEP_EVERY_US: u64 = 5_000_000;

/// The default `--max-store-bytes`.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// What a map entry costs beyond its key and state (hash map bucket, allocation headers).
const ENTRY_OVERHEAD: usize = 64;

struct Entry {
    held: Held,
    expires_at: u64,
}

/// What a key holds: a counter, or a reservation's record (per counter it charged, its key
/// and what the estimate left there).
enum Held {
    Counter(State),
    Record(Vec<(String, Reserved)>),
}

/// The bytes an entry holds, as the store accounts for them.
fn entry_bytes(key: &str, held: &Held) -> usize {
    let held = match held {
        Held::Counter(State::Window(_)) => 16,
        Held::Counter(State::Log(l)) => 32 + 24 * l.entries.len(),
        Held::Counter(State::Tat(t)) => 48 + 24 * t.history.len(),
        Held::Counter(State::Slots(s)) => 24 + 32 * s.held.len(),
        Held::Record(entries) => entries.iter().map(|(k, _)| k.len() + 56).sum(),
    };
    key.len() + held + ENTRY_OVERHEAD
}

#[derive(Default)]
struct MemoryShard {
    map: HashMap<String, Entry>,
    /// What the entries hold, by [`entry_bytes`].
    bytes: usize,
}

impl MemoryShard {
    /// Drops expired entries, then the live ones closest to expiry (never `keep`), until the
    /// shard holds at most 90% of `budget`. Returns how many live entries were evicted.
    fn shrink(&mut self, budget: usize, now: u64, keep: &str) -> u64 {
        let bytes = &mut self.bytes;
        self.map.retain(|k, e| {
            let live = e.expires_at > now;
            if !live {
                *bytes -= entry_bytes(k, &e.held);
            }
            live
        });
        let target = budget / 10 * 9;
        if self.bytes <= target {
            return 0;
        }
        let mut by_expiry: Vec<(u64, usize, String)> = self
            .map
            .iter()
            .filter(|(k, _)| k.as_str() != keep)
            .map(|(k, e)| (e.expires_at, entry_bytes(k, &e.held), k.clone()))
            .collect();
        by_expiry.sort_unstable_by_key(|(at, _, _)| *at);
        let mut evicted = 0;
        for (_, size, key) in by_expiry {
            if self.bytes <= target {
                break;
            }
            self.map.remove(&key);
            self.bytes -= size;
            evicted += 1;
        }
        evicted
    }
}

pub struct MemoryStore {
    shards: Box<[Mutex<MemoryShard>]>,
    /// Each shard's share of `--max-store-bytes`.
    shard_budget: usize,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    last_sweep_us: AtomicU64,
    metrics: Arc<Metrics>,
    layout: Layout,
}

impl Store for MemoryStore {
    async fn apply(&self, plan: &Plan<'_>, mode: Mode) -> Result<Vec<ChargeOutcome>, StoreError> {
        Ok(self.apply_now(plan, mode))
    }

    async fn read(&self, plan: &Plan<'_>) -> Result<Vec<CounterReading>, StoreError> {
        Ok(self.read_now(plan))
    }

    async fn reset(&self, plan: &Plan<'_>) -> Result<Vec<CounterReading>, StoreError> {
        Ok(self.reset_now(plan))
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
    /// MemoryShard indexes, ascending, each once.
    order: Vec<usize>,
    guards: Vec<MutexGuard<'s, MemoryShard>>,
    /// Per placed charge, its shard.
    shard_of: Vec<usize>,
}

impl Locked<'_> {
    fn shard(&mut self, spec: usize) -> &mut MemoryShard {
        let shard = self.shard_of[spec];
        let i = self.order.binary_search(&shard).unwrap_or_default();
        &mut self.guards[i]
    }

    /// Takes a reservation's record out of the store (`spec`: the record's index in `shard_of`).
    fn take_record(&mut self, spec: usize, key: &str, now: u64) -> Option<Vec<(String, Reserved)>> {
        let shard = self.shard(spec);
        let entry = shard.map.remove(key)?;
        shard.bytes -= entry_bytes(key, &entry.held);
        match entry.held {
            Held::Record(r) if entry.expires_at > now => Some(r),
            _ => None,
        }
    }

    fn load(&mut self, spec: usize, key: &str, now: u64) -> Option<State> {
        self.shard(spec)
            .map
            .get(key)
            .filter(|e| e.expires_at > now)
            .and_then(|e| match &e.held {
                Held::Counter(state) => Some(state.clone()),
                Held::Record(_) => None,
            })
    }

    /// Writes (or removes) a counter; shrinks its shard when over `budget`. Returns how many
    /// live entries that evicted.
    fn store(
        &mut self,
        spec: usize,
        key: &str,
        state: Option<State>,
        p: &LimitParams,
        budget: usize,
        now: u64,
    ) -> u64 {
        let shard = self.shard(spec);
        let Some(state) = state else {
            if let Some(old) = shard.map.remove(key) {
                shard.bytes -= entry_bytes(key, &old.held);
            }
            return 0;
        };
        let expires = expires_at(&state, p);
        self.put(spec, key, Held::Counter(state), expires, budget, now)
    }

    /// Writes an entry; shrinks its shard when over `budget`. Returns how many live entries
    /// that evicted.
    fn put(
        &mut self,
        spec: usize,
        key: &str,
        held: Held,
        expires_at: u64,
        budget: usize,
        now: u64,
    ) -> u64 {
        let shard = self.shard(spec);
        let size = entry_bytes(key, &held);
        let entry = Entry { expires_at, held };
        // In place when the key is there: no new allocation for the key on the hot path.
        match shard.map.get_mut(key) {
            Some(old) => {
                shard.bytes = shard.bytes - entry_bytes(key, &old.held) + size;
                *old = entry;
            }
            None => {
                shard.bytes += size;
                shard.map.insert(key.to_string(), entry);
            }
        }
        if shard.bytes > budget {
            shard.shrink(budget, now, key)
        } else {
            0
        }
    }
}

impl MemoryStore {
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(MemoryShard::default()))
                .collect(),
            shard_budget: DEFAULT_MAX_BYTES / SHARDS,
            hasher: RandomState::new(),
            clock,
            last_sweep_us: AtomicU64::new(0),
            metrics: Arc::default(),
            layout: Layout::OneNode,
        }
    }

    /// Groups a request's charges as `layout` says: [`Layout::OneNode`] (the default: one
    /// instance, every counter in one place, so a request is one all-or-nothing group) or
    /// [`Layout::ByTag`], step for step what a Redis Cluster decides (groups by hash tag,
    /// shared limits after, refunds), which the tests compare a cluster with.
    pub fn with_layout(mut self, layout: Layout) -> MemoryStore {
        self.layout = layout;
        self
    }

    /// Counts into `metrics` (refunds, evictions).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> MemoryStore {
        self.metrics = metrics;
        self
    }

    /// Holds at most about `bytes` of counters (`--max-store-bytes`).
    pub fn with_max_bytes(mut self, bytes: usize) -> MemoryStore {
        self.shard_budget = (bytes / SHARDS).max(1);
        self
    }

    /// The bytes the counters hold, as the store accounts for them.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
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
                let shard = &mut *s;
                let bytes = &mut shard.bytes;
                shard.map.retain(|k, e| {
                    let live = e.expires_at > now;
                    if !live {
                        *bytes -= entry_bytes(k, &e.held);
                    }
                    live
                });
                shard.map.len()
            })
            .sum()
    }

    /// Locks the shards of `placed`'s keys and of `records` (reservation records, one per
    /// group, after the charges in `shard_of`), in ascending order.
    fn lock(&self, placed: &Placed<'_>, records: &[String]) -> Locked<'_> {
        let shard_of: Vec<usize> = placed
            .charges
            .iter()
            .map(|s| self.shard_of(&s.key))
            .chain(records.iter().map(|k| self.shard_of(k)))
            .collect();
        let mut order = shard_of.clone();
        order.sort_unstable();
        order.dedup();
        let guards = order.iter().map(|&s| self.shards[s].lock()).collect();
        Locked {
            order,
            guards,
            shard_of,
        }
    }

    fn read_now(&self, plan: &Plan<'_>) -> Vec<CounterReading> {
        self.read_and(plan, |_, _, _, _| {})
    }

    /// Resets every counter of `plan` under its shards' locks (the whole request at once);
    /// answers what each held.
    fn reset_now(&self, plan: &Plan<'_>) -> Vec<CounterReading> {
        let budget = self.shard_budget;
        self.read_and(plan, |locked, i, r, p| {
            let after = inspect::reset(&r.state, p, r.now_us);
            locked.store(i, &r.key, after, p, budget, r.now_us);
        })
    }

    /// Reads `plan`'s counters under their shards' locks and runs `then` on each reading
    /// (with its limit's numbers) while they are held.
    fn read_and(
        &self,
        plan: &Plan<'_>,
        mut then: impl FnMut(&mut Locked<'_>, usize, &CounterReading, &LimitParams),
    ) -> Vec<CounterReading> {
        let now = self.clock.now_us();
        let placed = place(plan, "", self.layout);
        let mut locked = self.lock(&placed, &[]);
        placed
            .charges
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let reading = CounterReading {
                    state: locked.load(i, &spec.key, now),
                    now_us: now,
                    key: spec.key.to_string(),
                    lease: 0,
                };
                then(&mut locked, i, &reading, &spec.params);
                reading
            })
            .collect()
    }

    fn apply_now(&self, plan: &Plan<'_>, mode: Mode) -> Vec<ChargeOutcome> {
        let now = self.clock.now_us();
        let placed = place(plan, "", self.layout);
        let records: Vec<String> = match mode.has_record() {
            true => (0..placed.groups.len())
                .map(|gi| record_key(&placed, gi))
                .collect(),
            false => Vec::new(),
        };
        let mut locked = self.lock(&placed, &records);
        let mut protocol = Protocol::new(&placed, mode);
        let run = Run {
            now,
            budget: self.shard_budget,
            metrics: &self.metrics,
            records: &records,
        };
        loop {
            match protocol.step() {
                Next::Run(runs) => {
                    for (gi, m) in runs {
                        let answer = match m {
                            Mode::Settle => settle_group(&mut locked, &placed, gi, &run),
                            _ => run_group(&mut locked, &placed, gi, m, &run),
                        };
                        protocol.record(gi, answer);
                    }
                }
                Next::Refund(by_group) => {
                    self.metrics.refunds.inc_by(by_group.len() as u64);
                    for (gi, refunds) in by_group {
                        let answer = refund_group(&mut locked, &placed, gi, &refunds, &run, mode);
                        protocol.record(gi, answer);
                    }
                }
                Next::Done => return protocol.into_outcomes(),
            }
        }
    }
}

/// The group's distinct keys (as indexes into the placed charges) and its charges as a batch over them.
fn group_batch<'p>(placed: &'p Placed<'_>, gi: usize) -> (&'p [usize], Vec<BatchCharge>) {
    let g = &placed.groups[gi];
    let charges = g
        .charges
        .iter()
        .zip(&g.key_of)
        .map(|(&ci, &k)| {
            let s = &placed.charges[ci];
            BatchCharge {
                counter: k,
                params: s.params,
                cost: s.cost,
                role: s.role,
                slot: placed.slot,
            }
        })
        .collect();
    (&g.keys, charges)
}

/// What a group run needs besides its counters: the time, each shard's budget, the metrics,
/// and a reservation's record keys (one per group; none outside a reservation or settle).
struct Run<'m> {
    now: u64,
    budget: usize,
    metrics: &'m Metrics,
    records: &'m [String],
}

/// Decides one placement group and writes back what it commits.
fn run_group(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    mode: Mode,
    run: &Run<'_>,
) -> GroupAnswer {
    let (now, budget, metrics) = (run.now, run.budget, run.metrics);
    let (keys, charges) = group_batch(placed, gi);
    let mut counters: Vec<Counter> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.charges[s];
            Counter::new(locked.load(s, &spec.key, now), &spec.params, now)
        })
        .collect();
    let quota = placed.quota_descriptors;
    let (evaluated, outcomes) =
        batch::evaluate_and_report(&mut counters, &charges, now, mode, quota);
    for (counter, &s) in counters.into_iter().zip(keys) {
        if counter.commit {
            let spec = &placed.charges[s];
            let evicted = locked.store(s, &spec.key, counter.after, &spec.params, budget, now);
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    if mode == Mode::Reserve {
        // What landed, by key: the record a settle finds (none when nothing landed).
        let g = &placed.groups[gi];
        let entries: Vec<(String, Reserved)> = g
            .charges
            .iter()
            .zip(&charges)
            .zip(&evaluated.landings)
            .filter(|((_, c), l)| l.added > 0 && c.params.algorithm != Algorithm::Concurrency)
            .map(|((&ci, c), &landing)| {
                let reserved = Reserved {
                    cost: c.cost,
                    landing,
                };
                (placed.charges[ci].key.to_string(), reserved)
            })
            .collect();
        if !entries.is_empty() {
            let spec = placed.charges.len() + gi;
            let key = &run.records[gi];
            let expires = now + record_life_us(g, &placed.charges);
            let evicted = locked.put(spec, key, Held::Record(entries), expires, budget, now);
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    outcomes.into_iter().zip(evaluated.landings).collect()
}

/// Settles the reservation the request's id names in one group: its record is taken (so a
/// second settle finds nothing), each charge on a counter the reservation charged settles with
/// its cost as the actual use, and the group answers as things stand.
fn settle_group(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    run: &Run<'_>,
) -> GroupAnswer {
    let (now, budget, metrics) = (run.now, run.budget, run.metrics);
    let (keys, charges) = group_batch(placed, gi);
    let mut record = locked
        .take_record(placed.charges.len() + gi, &run.records[gi], now)
        .unwrap_or_default();
    let g = &placed.groups[gi];
    let reserved: Vec<Option<Reserved>> = g
        .charges
        .iter()
        .map(|&ci| {
            let at = record
                .iter()
                .position(|(k, _)| *k == placed.charges[ci].key)?;
            Some(record.swap_remove(at).1)
        })
        .collect();
    let mut counters: Vec<Counter> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.charges[s];
            Counter::new(locked.load(s, &spec.key, now), &spec.params, now)
        })
        .collect();
    let evaluated = reservation::settle_group(&mut counters, &charges, &reserved, now);
    for (counter, &s) in counters.iter().zip(keys) {
        if counter.commit {
            let spec = &placed.charges[s];
            let evicted = locked.store(
                s,
                &spec.key,
                counter.after.clone(),
                &spec.params,
                budget,
                now,
            );
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    let finals: Vec<&Option<State>> = counters.iter().map(Counter::final_state).collect();
    let outcomes = batch::report(
        &finals,
        &charges,
        &evaluated.allowed,
        &evaluated.landings,
        now,
        false,
    );
    outcomes.into_iter().zip(evaluated.landings).collect()
}

/// Refunds what `refunds` says in one group, writes the counters back and answers as things
/// stand.
fn refund_group(
    locked: &mut Locked<'_>,
    placed: &Placed<'_>,
    gi: usize,
    refunds: &[Refund],
    run: &Run<'_>,
    mode: Mode,
) -> GroupAnswer {
    let (now, budget, metrics) = (run.now, run.budget, run.metrics);
    let (keys, charges) = group_batch(placed, gi);
    let mut states: Vec<Option<State>> = keys
        .iter()
        .map(|&s| {
            let spec = &placed.charges[s];
            let mut state = locked.load(s, &spec.key, now);
            refresh(&mut state, &spec.params, now);
            state
        })
        .collect();
    for (c, u) in charges.iter().zip(refunds) {
        if u.refund {
            let s = keys[c.counter];
            let state = &mut states[c.counter];
            refund(state, &c.params, u.landing, now);
            let spec = &placed.charges[s];
            let evicted = locked.store(s, &spec.key, state.clone(), &spec.params, budget, now);
            metrics.memory_evictions.inc_by(evicted);
        }
    }
    if mode == Mode::Reserve {
        // The reservation did not happen here: its record goes with its charges.
        locked.take_record(placed.charges.len() + gi, &run.records[gi], now);
    }
    let allowed: Vec<bool> = refunds.iter().map(|u| u.allowed).collect();
    let landings: Vec<Landing> = refunds.iter().map(Refund::kept).collect();
    let finals: Vec<&Option<State>> = states.iter().collect();
    let outcomes = batch::report(
        &finals,
        &charges,
        &allowed,
        &landings,
        now,
        mode == Mode::CountRejected,
    );
    outcomes.into_iter().zip(landings).collect()
}
