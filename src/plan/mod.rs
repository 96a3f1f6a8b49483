//! Planning: `(Config, request) -> Plan`, pure and allocation-light. This file says what a
//! plan is; [`pipeline::plan`] builds one, pass by pass.
//!
//! For each descriptor of the request, walk the domain's match tree as envoyproxy/ratelimit
//! does (exact beats wildcard beats key-only; no backtracking; a limit applies only at the
//! request's exact depth), add the limits of `hierarchical` rules passed on the way, apply a
//! `limit` override and `replaces`, and emit one [`PlannedCharge`] per limit: its counter key, the
//! limit, the cost, and its role in the decision; a divided pool adds the charges it needs
//! beside its own (a class's, a tenant's). Counter keys and their hash tags are built in
//! [`counter_key`].

mod candidates;
pub mod counter_key;
mod fair;
mod keys;
mod matching;
pub mod pipeline;
mod price;
mod shares;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::ops::Range;

use counter_key::tag_of;

use crate::algorithm::concurrency::SlotId;
use crate::algorithm::rule::Role;
use crate::limit::Limit;
use crate::telemetry::stats::name::StatsBinding;

/// Everything a request will charge, and how each descriptor is answered.
#[derive(Debug)]
pub struct Plan<'c> {
    pub descriptors: Vec<DescriptorPlan<'c>>,
    pub charges: Vec<PlannedCharge<'c>>,
    /// Descriptors whose matched rule has `quota_mode`, charged or not (see
    /// [`crate::algorithm::rule::verdict`]).
    pub quota_descriptors: usize,
    /// The id of the concurrency slots the request takes, releases or renews (`(0, 0)`: none;
    /// see [`crate::algorithm::concurrency`]).
    pub slot: SlotId,
    /// Descriptors that reach a `spend` limit but whose model (or token kind) the domain's
    /// prices do not price: the request is refused and charges nothing.
    pub unpriced: Vec<usize>,
    /// When the store's answer is due: the caller's `grpc-timeout` less the answer's way back
    /// (`crate::service::hold::due`). `None`: the caller set no deadline; a store then takes
    /// its own (`--redis-timeout`), which also caps this.
    pub due: Option<tokio::time::Instant>,
}

impl Plan<'_> {
    /// `n` descriptors, none limited: every one is answered OK without a limit (an unknown
    /// or disabled domain).
    pub fn no_limits(n: usize) -> Plan<'static> {
        Plan {
            descriptors: vec![
                DescriptorPlan {
                    kind: DescriptorKind::NoLimit,
                    charges: 0..0,
                    quota: false,
                    metadata: None,
                };
                n
            ],
            charges: Vec::new(),
            quota_descriptors: 0,
            slot: (0, 0),
            unpriced: Vec::new(),
            due: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescriptorKind {
    /// Nothing in the config applies: OK without a limit.
    NoLimit,
    /// `unlimited: true`: OK, remaining u32::MAX.
    Unlimited,
    /// Answered from its charges.
    Limited,
}

#[derive(Debug, Clone)]
pub struct DescriptorPlan<'c> {
    pub kind: DescriptorKind,
    /// This descriptor's charges in `Plan::charges`.
    pub charges: Range<usize>,
    /// `quota_mode` on the matched rule.
    pub quota: bool,
    /// The matched rule's `metadata`.
    pub metadata: Option<&'c serde_json::Map<String, serde_json::Value>>,
}

/// A charge as planned (first stage; a store places it as a `store::placement::PlacedCharge`):
/// one limit charged by one descriptor, its counter key without a store prefix.
#[derive(Debug, Clone)]
pub struct PlannedCharge<'c> {
    pub descriptor: usize,
    pub limit: Cow<'c, Limit>,
    /// The envoyproxy/ratelimit statistics of the rule that owns the limit (`None` for an
    /// override, or without statistics).
    pub stats: Option<&'c StatsBinding>,
    /// The counter key, `{tag}rest`, without any store prefix.
    pub key: String,
    pub cost: u64,
    pub role: Role,
}

impl<'c> PlannedCharge<'c> {
    /// The hash tag (between the leading braces): keys with one tag share a Redis hash slot.
    pub fn tag(&self) -> &str {
        tag_of(&self.key)
    }

    /// A charge beside this one on `part` of its limit (a class's counter, a fair share's
    /// tenant or active count): its key this one's plus `suffix`, so in its hash slot; its
    /// limit borrowed from the config as this one's is, or owned as an override's is.
    fn beside(
        &self,
        part: impl for<'a> Fn(&'a Limit) -> Option<&'a Limit>,
        suffix: &str,
        cost: u64,
        role: Role,
    ) -> Option<PlannedCharge<'c>> {
        let limit = match &self.limit {
            Cow::Borrowed(l) => Cow::Borrowed(part(l)?),
            Cow::Owned(l) => Cow::Owned(part(l)?.clone()),
        };
        Some(PlannedCharge {
            descriptor: self.descriptor,
            limit,
            stats: None,
            key: format!("{}{suffix}", self.key),
            cost,
            role,
        })
    }
}

/// A request the plan cannot be built for (the caller's fault: `INVALID_ARGUMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("descriptor {descriptor}: hits {hits} is more than domain '{domain}' allows (max_hits: {max})")]
    OverMaxHits {
        descriptor: usize,
        hits: u64,
        domain: String,
        max: u64,
    },
    /// The override's unit as the request numbers it (0 is `UNKNOWN`).
    #[error(
        "descriptor {descriptor}: limit override has unit {}; expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR",
        if *.unit == 0 { "UNKNOWN".to_string() } else { .unit.to_string() }
    )]
    OverrideUnit { descriptor: usize, unit: i32 },
    #[error("descriptor {descriptor}: limit override must have requests_per_unit of at least 1")]
    OverrideZero { descriptor: usize },
}
