//! What a call ended with, as data: the plan, what the store (or the failure policy) answered
//! for each charge, a slot release made on the way, and a store failure the policy answered
//! for. The service builds an [`Ended`] once per call; the decision, the response and the
//! report of the call (`observe`) are all read from it.

use std::time::Duration;

use crate::algorithm::concurrency::SlotId;
use crate::algorithm::rule::ChargeOutcome;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};
use crate::plan::Plan;
use crate::service::decision::{assemble, on_store_failure, refused, Code, Decision};
use crate::service::error::CallError;
use crate::service::hold::Hold;
use crate::service::respond::response;
use crate::service::settings::{FailureMode, Settings};
use crate::store::error::StoreError;

/// How one call ended.
pub struct Ended<'c> {
    /// A slot release the request carried, done before its other descriptors were decided.
    pub release: Option<Released>,
    /// A settle the request carried, done before its other descriptors were decided.
    pub settle: Option<Settled>,
    /// The store failed and this failure policy answered (or, as `error`, refused).
    pub store_failed: Option<(StoreError, FailureMode)>,
    pub result: Result<Answered<'c>, CallError>,
}

impl<'c> Ended<'c> {
    /// A call that ended with `result`, and nothing besides.
    pub fn result(result: Result<Answered<'c>, CallError>) -> Ended<'c> {
        Ended {
            release: None,
            settle: None,
            store_failed: None,
            result,
        }
    }

    /// A call refused before it was decided.
    pub fn refused(e: CallError) -> Ended<'c> {
        Ended::result(Err(e))
    }

    /// A call decided by `by`.
    pub fn answered(plan: Plan<'c>, outcomes: Vec<ChargeOutcome>, by: AnsweredBy) -> Ended<'c> {
        Ended::result(Ok(Answered::new(plan, outcomes, by)))
    }
}

/// What a settle did.
#[derive(Debug)]
pub struct Settled {
    pub id: SlotId,
    /// `Ok(None)`: the descriptors reach no limit a reservation charges.
    pub done: Result<Option<SettleDone>, CallError>,
}

/// What a settle found: on how many limits the reservation had charged (0: the id was settled
/// already, or never issued), and the largest actual use it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettleDone {
    pub limits: u32,
    pub actual: u64,
}

/// What a release did.
#[derive(Debug)]
pub struct Released {
    pub id: SlotId,
    /// `Ok(None)`: the descriptors reach no concurrency limit.
    pub done: Result<Option<SlotsDone>, CallError>,
}

/// What a release or a renew did: on how many concurrency limits the id held slots, and the
/// shortest hold among them (how long the slots stay held without a renew).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotsDone {
    pub limits: u32,
    pub hold_us: Option<u64>,
}

/// A decided request.
pub struct Answered<'c> {
    pub plan: Plan<'c>,
    /// One per planned charge (none when nothing was charged).
    pub outcomes: Vec<ChargeOutcome>,
    pub by: AnsweredBy,
    /// The rest of a request whose marked descriptors were split off (the plan is of it), and
    /// where those descriptors were: each is answered OK with no limit (`service::marked`).
    pub rest: Option<(RateLimitRequest, Vec<usize>)>,
    /// Descriptors of the plan refused for a missing estimate (`AnsweredBy::NoEstimate`) or
    /// price (`AnsweredBy::Unpriced`).
    pub refused: Vec<usize>,
    /// The request was decided as a reservation (`Mode::Reserve`).
    pub reserving: bool,
    /// An answer to hold before it goes out (`max_wait`, see `service::hold`); taken by the
    /// service, which then sets `held_us`.
    pub hold: Option<Hold>,
    /// How long the answer was held, µs.
    pub held_us: u64,
    /// A charge could have waited, but `--max-held` answers were held already: it was decided
    /// without waiting.
    pub held_full: bool,
}

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredBy {
    /// Nothing was asked of a store: no limit applies.
    Nobody,
    /// The kill switch (`--disabled`, or the domain's `disabled: true`).
    Disabled,
    /// The store, in this long.
    Store(Duration),
    /// The failure policy (`allow` or `deny`) for a failed store.
    Policy(FailureMode),
    /// `--failure-mode local`: the in-process limiter, each limit shared out.
    Local,
    /// Nobody: a reservation without an estimate, in a domain without a default, is refused.
    NoEstimate,
    /// Nobody: a spend limit's prices do not price the request's model or token kind.
    Unpriced,
}

impl<'c> Answered<'c> {
    pub fn new(plan: Plan<'c>, outcomes: Vec<ChargeOutcome>, by: AnsweredBy) -> Answered<'c> {
        Answered {
            plan,
            outcomes,
            by,
            rest: None,
            refused: Vec::new(),
            reserving: false,
            hold: None,
            held_us: 0,
            held_full: false,
        }
    }

    /// The decision: the one denial and reporting rules over what each charge got.
    pub fn decision(&self, global_shadow: bool) -> Decision<'_> {
        match self.by {
            AnsweredBy::Policy(mode) => {
                on_store_failure(&self.plan, mode == FailureMode::Allow, global_shadow)
            }
            AnsweredBy::NoEstimate | AnsweredBy::Unpriced => {
                refused(&self.plan, &self.refused, global_shadow)
            }
            _ => assemble(&self.plan, &self.outcomes, global_shadow),
        }
    }

    /// Whether the request reserved: its charges landed under its id, with a record.
    pub fn reserved(&self, decision: &Decision<'_>) -> bool {
        self.plan.slot != (0, 0)
            && matches!(self.by, AnsweredBy::Store(_))
            && decision.overall == Code::Ok
            && self.reserving
    }

    /// The answer on the wire for `req` (the request as it came).
    pub fn response(
        &self,
        settings: &Settings,
        req: &RateLimitRequest,
        decision: &Decision<'_>,
    ) -> RateLimitResponse {
        let policy = match self.by {
            AnsweredBy::Policy(mode) => Some(mode),
            AnsweredBy::Local => Some(FailureMode::Local),
            _ => None,
        };
        let (decided, released) = match &self.rest {
            Some((rest, at)) => (rest, &at[..]),
            None => (req, &[][..]),
        };
        let reserved = self.reserved(decision);
        let mut out = response(settings, decided, &self.plan, decision, policy, reserved);
        for &i in released {
            let ok = crate::pb::rls::rate_limit_response::DescriptorStatus {
                code: crate::pb::rls::rate_limit_response::Code::Ok as i32,
                ..Default::default()
            };
            out.statuses.insert(i.min(out.statuses.len()), ok);
        }
        out
    }

    /// The request the plan is of.
    pub fn request<'r>(&'r self, req: &'r RateLimitRequest) -> &'r RateLimitRequest {
        self.rest.as_ref().map_or(req, |(rest, _)| rest)
    }
}
