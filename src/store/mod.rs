//! Where counters live. A store executes a plan's charges atomically (all-or-nothing, see
//! [`crate::algorithm::batch`]) and answers a [`ChargeOutcome`] per charge.

pub mod any;
pub mod error;
pub mod memory;
pub mod placement;
pub mod protocol;
pub mod redis;

use std::future::Future;

use crate::algorithm::rule::Mode;

use crate::algorithm::inspect::Usage;
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::State;
use crate::limit::LimitParams;
use crate::plan::Plan;

use error::StoreError;
use placement::Placed;
use protocol::Refund;

/// What a decision left landed, owned, so that it can be given back later: a held call
/// (`max_wait`) whose caller went away gives its place back ([`Store::give_back`]).
pub struct Taken {
    pub placed: Placed<'static>,
    /// Per placement group with something landed: its refunds, and the `now` it ran at (the
    /// Redis script's; the memory store reads its clock again).
    pub leftovers: Vec<(usize, Vec<Refund>, i64)>,
    /// The mode the request ran in.
    pub mode: Mode,
}

impl Taken {
    /// Nothing to give back.
    pub fn nothing(mode: Mode) -> Taken {
        Taken {
            placed: Placed::default(),
            leftovers: Vec::new(),
            mode,
        }
    }
}

pub trait Store: Send + Sync + 'static {
    /// Decides and charges `plan`'s charges as one request, by the rule of
    /// [`crate::algorithm::rule::verdict`], in `mode` ([`Mode::charging`]: `Decide`, or
    /// `CountRejected` for envoyproxy/ratelimit's counting, where every charge lands even on a
    /// denied request). Outcomes are index-aligned with `plan.charges`.
    fn apply(
        &self,
        plan: &Plan<'_>,
        mode: Mode,
    ) -> impl Future<Output = Result<Vec<ChargeOutcome>, StoreError>> + Send;

    /// [`Store::apply`], keeping what landed so that [`Store::give_back`] can take it back.
    /// A store that cannot give back keeps nothing: what it charged then stays until its window
    /// passes (under-admitting, never over-admitting).
    fn apply_taking(
        &self,
        plan: &Plan<'_>,
        mode: Mode,
    ) -> impl Future<Output = Result<(Vec<ChargeOutcome>, Taken), StoreError>> + Send {
        async move { Ok((self.apply(plan, mode).await?, Taken::nothing(mode))) }
    }

    /// Refunds what [`Store::apply_taking`] left landed, exactly where the algorithms can
    /// (a token bucket's refund history, `algorithm::token_bucket`). A failure only logs.
    fn give_back(&self, taken: Taken) -> impl Future<Output = ()> + Send {
        let _ = taken;
        async {}
    }

    /// What kind of store this is, for spans and logs (`memory`, `redis`).
    fn name(&self) -> &'static str;

    /// Whether the store can take requests now (readiness).
    fn is_ready(&self) -> bool {
        true
    }

    /// Why the store is not ready (`redis 127.0.0.1:6390: connection refused`).
    fn reason(&self) -> Option<StoreError> {
        None
    }

    /// A risk worth showing while ready (an evicting Redis).
    fn warning(&self) -> Option<String> {
        None
    }

    /// This region's leases of global limits (the Redis store with `--region`; else none).
    fn leases(&self) -> Vec<LeaseReport> {
        Vec::new()
    }

    /// Periodic upkeep (reclaiming expired counters, probing connections).
    fn maintain(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// After serving has stopped: refunds what this instance holds of shared counters (the
    /// Redis store's unspent leases).
    fn close(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Runs a serving thread's `serve` (see [`crate::serve::threads`]), inside that thread's runtime:
    /// a store may set up what the thread's calls should use there (the Redis store opens
    /// connections whose I/O runs on the thread).
    fn serve_thread<F: Future>(&self, serve: F) -> impl Future<Output = F::Output> {
        serve
    }

    /// Reads `plan`'s counters as they stand, writing nothing (`GET /counters`); index-aligned
    /// with `plan.charges`.
    fn read(
        &self,
        plan: &Plan<'_>,
    ) -> impl Future<Output = Result<Vec<CounterReading>, StoreError>> + Send {
        let _ = plan;
        let e = StoreError::unsupported(self.name(), "reading counters");
        async move { Err(e) }
    }

    /// Resets `plan`'s counters as [`crate::algorithm::inspect::reset`] says, atomically per
    /// placement group (`POST /counters/reset`); per charge, its counter as the reset found it.
    fn reset(
        &self,
        plan: &Plan<'_>,
    ) -> impl Future<Output = Result<Vec<CounterReading>, StoreError>> + Send {
        let _ = plan;
        let e = StoreError::unsupported(self.name(), "resetting counters");
        async move { Err(e) }
    }
}

/// A counter as a store holds it, read without writing.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterReading {
    /// The stored state (`None`: no key, or one that has expired).
    pub state: Option<State>,
    /// The store's now when it was read (Redis `TIME` under `--clock redis`), µs.
    pub now_us: u64,
    /// The full counter key, with the store's prefix.
    pub key: String,
    /// Units of it this instance holds in a lease (`lease:`, Redis only).
    pub lease: u64,
    /// A global limit (Redis with `--region` only): the region's lease counter was read.
    pub held: Option<GlobalHeld>,
}

/// What a region holds of a global limit in the authority's current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalHeld {
    /// Granted to the region (its lease counter's limit).
    pub units: u64,
    /// Of them, given back to home: counted as spent in the lease counter, and no longer
    /// the region's.
    pub back: u64,
    /// Until the window ends (µs).
    pub reset_after_us: u64,
}

impl GlobalHeld {
    /// `p` as the region's lease counter is limited: to what the region was granted.
    pub fn params(held: Option<GlobalHeld>, p: &LimitParams) -> LimitParams {
        match held {
            Some(h) => LimitParams {
                limit: h.units,
                burst: h.units,
                // A lease counter ends with its lease, not with a calendar period.
                calendar: None,
                ..*p
            },
            None => *p,
        }
    }

    /// The lease counter as an operator reads it: `used` what the region spent (not what it
    /// gave back), the reset the window's end; returns the limit, what the region holds.
    pub fn view(held: Option<GlobalHeld>, usage: &mut Usage) -> Option<u64> {
        let h = held?;
        usage.used = usage.used.saturating_sub(h.back);
        usage.reset_after_us = h.reset_after_us;
        Some(h.units.saturating_sub(h.back))
    }
}

/// One global limit's lease in this region, as this instance last read it (docs/multi-region.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseReport {
    /// The limit (`domain.key_value|suffix`).
    pub id: String,
    pub region: String,
    /// The authority's window spendable now, what the region holds for it (its safe share
    /// included) and of that the safe share, and how long until it lapses (ms); `None`: no
    /// lease now.
    pub window: Option<(u64, u64, u64, u64)>,
    /// Units the authority had issued in its window when it last answered this instance (the
    /// instance holding the region's refill lock), and how long ago (ms).
    pub issued: Option<(u64, u64)>,
}
