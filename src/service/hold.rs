//! Waiting instead of refusing (`max_wait` on a token bucket): a request that would fit
//! within its wait is admitted *now* — its place taken in the store, so callers are served in
//! the order the store saw them, across instances — and its answer held until it fits.
//!
//! - **How long a request may wait**: the smallest of its limits' `max_wait` and what the
//!   caller's deadline leaves ([`budget`]: the `grpc-timeout` Envoy sends is its filter
//!   timeout), lowered in the plan before the store decides ([`cap_waits`]); a request that
//!   would need longer is refused at once, as without `max_wait`.
//! - **How long it is held**: until its cost would have fit on every bucket it waited on
//!   ([`hold_of`], from what the store reported, never sooner).
//! - **Bounded**: at most `--max-held` answers are held per instance. A request that finds
//!   them all taken is decided without waiting (refused when it does not fit now): the bound
//!   refuses, it never queues.
//! - **A caller that goes away** (cancelled, or its deadline passed) gives its place back:
//!   [`GiveBack`] refunds what landed when the held call is dropped, exactly where the
//!   algorithm can (a token bucket's refund history).
//!
//! A held answer holds no in-flight permit (`--max-in-flight` counts decisions, not waits).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use crate::algorithm::rule::{verdict, ChargeOutcome, Role, Verdict};
use crate::algorithm::token_bucket;
use crate::limit::Algorithm;
use crate::plan::Plan;
use crate::store::{Store, Taken};

/// The default `--max-held`.
pub const DEFAULT_MAX_HELD: usize = 10_000;

/// What a deadline leaves for waiting, in µs: the time left less a tenth of it (at least
/// 8 ms, at most half) for the decision itself and the answer's way back. `None`: no deadline.
pub fn budget(deadline: Option<tokio::time::Instant>) -> Option<u64> {
    let now = tokio::time::Instant::now();
    Some(
        due_from(deadline?, now)
            .saturating_duration_since(now)
            .as_micros() as u64,
    )
}

/// When the store's answer is due for a caller whose deadline is `deadline`: the same margin
/// as [`budget`] keeps for the answer's way back. Envoy's filter sends its timeout as
/// `grpc-timeout` (20 ms by default): its store answer is due 12 ms after the call came.
pub fn due(deadline: Option<tokio::time::Instant>) -> Option<tokio::time::Instant> {
    Some(due_from(deadline?, tokio::time::Instant::now()))
}

fn due_from(deadline: tokio::time::Instant, now: tokio::time::Instant) -> tokio::time::Instant {
    let left = deadline.saturating_duration_since(now);
    // At least 8 ms, but never all that is left: a deadline under 16 ms keeps half for the
    // store (a 5 ms caller's store answer is due 2.5 ms after the call, not at once).
    let margin = (left / 10).max(Duration::from_millis(8).min(left / 2));
    now + left.saturating_sub(margin)
}

/// Whether any of the plan's charges may wait.
pub fn waits(plan: &Plan<'_>) -> bool {
    plan.charges.iter().any(|c| c.limit.params.max_wait_us > 0)
}

/// Lowers every charge's wait to `budget` µs (0: none may wait). A check (cost 0) never
/// waits: nothing of it lands, so nothing would hold its place.
pub fn cap_waits(plan: &mut Plan<'_>, budget: u64) {
    for c in &mut plan.charges {
        let most = if c.cost == 0 { 0 } else { budget };
        if c.limit.params.max_wait_us > most {
            c.limit.to_mut().params.max_wait_us = most;
        }
    }
}

/// Whether a hold of `us` still ends before `deadline` leaves too little for the answer's way
/// back (the decision itself took some of the budget).
pub fn fits_deadline(us: u64, deadline: Option<tokio::time::Instant>) -> bool {
    budget(deadline).is_none_or(|left| us <= left)
}

/// A hold the deadline no longer leaves room for: the answer becomes a refusal (each charge
/// that waited is denied, with the time it needed), and what landed is given back.
pub fn refuse(plan: &Plan<'_>, outcomes: &mut [ChargeOutcome]) {
    for (c, o) in plan.charges.iter().zip(outcomes.iter_mut()) {
        let p = &c.limit.params;
        if o.allowed && p.algorithm == Algorithm::TokenBucket && p.max_wait_us > 0 {
            let us = token_bucket::hold_us(p, o.wait_us.unwrap_or(0));
            if us > 0 {
                *o = ChargeOutcome {
                    allowed: false,
                    remaining: 0,
                    wait_us: Some(us),
                };
            }
        }
    }
}

/// How long an admitted request is held: until every bucket it waited on has room for what
/// it charged there. 0 when it was denied or fit at once.
pub fn hold_of(plan: &Plan<'_>, outcomes: &[ChargeOutcome]) -> u64 {
    let charges = || plan.charges.iter().zip(outcomes);
    let v = verdict(
        charges().map(|(c, o)| (c.role, c.limit.params.overdraft, o.allowed)),
        plan.quota_descriptors,
    );
    if v != Verdict::Admit {
        return 0;
    }
    charges()
        .filter(|(c, o)| {
            let p = &c.limit.params;
            o.allowed
                && c.role != Role::Shadow
                && p.algorithm == Algorithm::TokenBucket
                && p.max_wait_us > 0
        })
        .map(|(c, o)| token_bucket::hold_us(&c.limit.params, o.wait_us.unwrap_or(0)))
        .max()
        .unwrap_or(0)
}

/// An answer to hold: for how long, what to give back if its caller goes away, and its place
/// among `--max-held`.
pub struct Hold {
    pub us: u64,
    pub taken: Taken,
    pub permit: OwnedSemaphorePermit,
}

/// Gives a held call's charges back to the store when dropped armed: its caller went away
/// (the call's future was dropped) before the hold ended.
pub struct GiveBack<S: Store> {
    store: Arc<S>,
    taken: Option<Taken>,
}

impl<S: Store> GiveBack<S> {
    pub fn new(store: Arc<S>, taken: Taken) -> GiveBack<S> {
        GiveBack {
            store,
            taken: Some(taken),
        }
    }

    /// The hold ended and the answer goes out: nothing to give back.
    pub fn disarm(mut self) {
        self.taken = None;
    }
}

impl<S: Store> Drop for GiveBack<S> {
    fn drop(&mut self) {
        let Some(taken) = self.taken.take() else {
            return;
        };
        // Outside a runtime (it is shutting down) the charges stay until their window passes.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        drop(runtime.spawn(async move { store.give_back(taken).await }));
    }
}

/// Holds the answer `hold` says, giving its place back if dropped before the end.
pub async fn held<S: Store>(store: &Arc<S>, hold: Hold) {
    let give_back = GiveBack::new(store.clone(), hold.taken);
    tokio::time::sleep(Duration::from_micros(hold.us)).await;
    give_back.disarm();
    drop(hold.permit);
}
