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

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::placement::{place, record_key, Layout, Placed};
use super::protocol::{Next, Protocol};
use super::{CounterReading, Store, Taken};
use crate::algorithm::inspect;
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::base::clock::Clock;
use crate::limit::LimitParams;
use crate::plan::Plan;
use crate::store::error::StoreError;
use crate::telemetry::metrics::Metrics;

mod groups;
mod shards;

use groups::{refund_group, run_group, settle_group, Run};
use shards::{entry_bytes, Locked, MemoryShard};
const SHARDS: usize = 64;
/// Expired counters are swept at most this often (they are also dropped when touched).
const SWEEP_EVERY_US: u64 = 5_000_000;

/// The default `--max-store-bytes`.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

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
        Ok(self.apply_now(plan, mode, false).0)
    }

    async fn apply_taking(
        &self,
        plan: &Plan<'_>,
        mode: Mode,
    ) -> Result<(Vec<ChargeOutcome>, Taken), StoreError> {
        let (outcomes, taken) = self.apply_now(plan, mode, true);
        Ok((outcomes, taken.unwrap_or_else(|| Taken::nothing(mode))))
    }

    async fn give_back(&self, taken: Taken) {
        let now = self.clock.now_us();
        let mut locked = self.lock(&taken.placed, &[]);
        let run = Run {
            now,
            budget: self.shard_budget,
            metrics: &self.metrics,
            records: &[],
        };
        self.metrics.refunds.inc_by(taken.leftovers.len() as u64);
        for (gi, refunds, _) in &taken.leftovers {
            refund_group(&mut locked, &taken.placed, *gi, refunds, &run, taken.mode);
        }
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
                    held: None,
                };
                then(&mut locked, i, &reading, &spec.params);
                reading
            })
            .collect()
    }

    /// Decides `plan`; with `taking`, also what stays landed (for a give-back).
    fn apply_now(
        &self,
        plan: &Plan<'_>,
        mode: Mode,
        taking: bool,
    ) -> (Vec<ChargeOutcome>, Option<Taken>) {
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
                Next::Done => {
                    let taken = taking.then(|| {
                        let leftovers = protocol.refunds(None);
                        Taken {
                            placed: placed.clone().into_owned(),
                            leftovers: leftovers
                                .into_iter()
                                .map(|(gi, r)| (gi, r, now as i64))
                                .collect(),
                            mode,
                        }
                    });
                    return (protocol.into_outcomes(), taken);
                }
            }
        }
    }
}
