//! From a plan and its store outcomes to the answer: a code, the deciding limit, what remains
//! and the honest wait, per descriptor, plus the overall code. Pure; the service maps it to
//! protobuf.
//!
//! The deciding limit of a descriptor is, when over, the denying limit with the longest wait
//! (a wait of "never" is longest); when OK, the limit with the least remaining.

use crate::algorithm::{Outcome, Role};
use crate::limit::Limit;
use crate::plan::{DescriptorKind, Plan};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Status<'p> {
    pub code: Code,
    /// The deciding limit; `None` when no limit applies.
    pub limit: Option<&'p Limit>,
    pub remaining: u32,
    /// OK: until the limit is whole again; OVER_LIMIT: until this request's cost fits.
    /// `None`: no limit, or a cost that can never fit.
    pub wait_us: Option<u64>,
    /// Over because the cost exceeds what the limit can ever grant.
    pub unsatisfiable: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision<'p> {
    pub overall: Code,
    pub statuses: Vec<Status<'p>>,
    /// Shadow mode (per rule or global) turned an over-limit answer into OK.
    pub shadowed: bool,
}

/// Assembles the answer. `global_shadow` reports real statuses but an overall OK.
pub fn decide<'p>(plan: &'p Plan<'_>, outcomes: &[Outcome], global_shadow: bool) -> Decision<'p> {
    let statuses: Vec<Status<'p>> = plan
        .descriptors
        .iter()
        .map(|d| match d.kind {
            DescriptorKind::NoLimit => Status {
                code: Code::Ok,
                limit: None,
                remaining: 0,
                wait_us: None,
                unsatisfiable: false,
            },
            DescriptorKind::Unlimited => Status {
                code: Code::Ok,
                limit: None,
                remaining: u32::MAX,
                wait_us: None,
                unsatisfiable: false,
            },
            DescriptorKind::Limited => descriptor_status(plan, d.charges.clone(), outcomes),
        })
        .collect();
    let mut over = false;
    let mut quota_seen = false;
    let mut quota_all_over = true;
    for (s, d) in statuses.iter().zip(&plan.descriptors) {
        if d.quota {
            quota_seen = true;
            quota_all_over &= s.code == Code::OverLimit;
        } else {
            over |= s.code == Code::OverLimit;
        }
    }
    over |= quota_seen && quota_all_over;
    let shadow_denied = plan
        .charges
        .iter()
        .zip(outcomes)
        .any(|(c, o)| c.role == Role::Shadow && !o.allowed);
    Decision {
        overall: if over && !global_shadow {
            Code::OverLimit
        } else {
            Code::Ok
        },
        statuses,
        shadowed: (over && global_shadow) || shadow_denied,
    }
}

fn descriptor_status<'p>(
    plan: &'p Plan<'_>,
    range: std::ops::Range<usize>,
    outcomes: &[Outcome],
) -> Status<'p> {
    let charges = &plan.charges[range.clone()];
    let outs = &outcomes[range];
    let denied = |i: &usize| !outs[*i].allowed && charges[*i].role != Role::Shadow;
    // "Never" (None) waits longest.
    let wait_rank = |i: &usize| outs[*i].wait_us.map_or(u64::MAX, |w| w);
    let (code, pick) = match (0..charges.len()).filter(denied).max_by_key(wait_rank) {
        Some(i) => (Code::OverLimit, i),
        None => (
            Code::Ok,
            (0..charges.len())
                .min_by_key(|&i| outs[i].remaining)
                .unwrap_or(0),
        ),
    };
    let o = outs[pick];
    Status {
        code,
        limit: Some(charges[pick].limit.as_ref()),
        remaining: o.remaining.min(u32::MAX as u64) as u32,
        wait_us: o.wait_us,
        unsatisfiable: code == Code::OverLimit && o.wait_us.is_none(),
    }
}
