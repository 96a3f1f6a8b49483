//! From a plan and what the store answered per charge to the answer: a code, the deciding
//! limit, what remains and the honest wait, per descriptor, plus the overall code. Pure;
//! [`crate::respond`] maps it to protobuf.
//!
//! The deciding limit of a descriptor is, when over, the denying limit with the longest wait
//! (a wait of "never" is longest); when OK, the limit with the least remaining. [`verdict`]
//! is the rule that says what a request's charges do: land, land only for overdraft limits,
//! or not at all.

use crate::limit::Limit;
use crate::plan::{DescriptorKind, Plan, Role};

/// What one charge's limit answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChargeOutcome {
    /// The limit had room for this charge (for overdraft: had anything left).
    pub allowed: bool,
    /// What is left after the request, in cost units.
    pub remaining: u64,
    /// Allowed: until the limit is whole again. Denied: until this cost fits; `None` = never.
    pub wait_us: Option<u64>,
}

/// How a request ends, from its charges' answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    /// Only overdraft limits are over: their charges still land, nothing else does.
    OverdraftOnly,
    Deny,
}

/// Classifies a request from `(role, overdraft, allowed)` per charge.
pub fn verdict(charges: impl Iterator<Item = (Role, bool, bool)>) -> Verdict {
    let mut hard = false;
    let mut overdraft = false;
    // Quota descriptors: (descriptor, any denial) — few per request, so a small vec.
    let mut quota: Vec<(u32, bool)> = Vec::new();
    for (role, is_overdraft, allowed) in charges {
        match role {
            Role::Shadow => {}
            Role::Enforced if allowed => {}
            Role::Enforced if is_overdraft => overdraft = true,
            Role::Enforced => hard = true,
            Role::Quota { descriptor } => match quota.iter_mut().find(|(d, _)| *d == descriptor) {
                Some(q) => q.1 |= !allowed,
                None => quota.push((descriptor, !allowed)),
            },
        }
    }
    if hard || (!quota.is_empty() && quota.iter().all(|&(_, denied)| denied)) {
        Verdict::Deny
    } else if overdraft {
        Verdict::OverdraftOnly
    } else {
        Verdict::Admit
    }
}

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
pub fn assemble<'p>(
    plan: &'p Plan<'_>,
    outcomes: &[ChargeOutcome],
    global_shadow: bool,
) -> Decision<'p> {
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

/// The answer when the store could not decide and the failure policy answers `code` for
/// every limited descriptor.
pub fn on_store_failure<'p>(plan: &'p Plan<'_>, code: Code) -> Decision<'p> {
    let statuses: Vec<Status<'p>> = plan
        .descriptors
        .iter()
        .map(|d| {
            let limit = (d.kind == DescriptorKind::Limited)
                .then(|| plan.charges[d.charges.start].limit.as_ref());
            Status {
                code: if limit.is_some() { code } else { Code::Ok },
                limit,
                remaining: 0,
                wait_us: None,
                unsatisfiable: false,
            }
        })
        .collect();
    let overall = if statuses.iter().any(|s| s.code == Code::OverLimit) {
        Code::OverLimit
    } else {
        Code::Ok
    };
    Decision {
        overall,
        statuses,
        shadowed: false,
    }
}

fn descriptor_status<'p>(
    plan: &'p Plan<'_>,
    range: std::ops::Range<usize>,
    outcomes: &[ChargeOutcome],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_descriptors_deny_only_when_all_are_over() {
        use Role::*;
        let q = |d| Quota { descriptor: d };
        assert_eq!(
            verdict([(q(0), false, false), (q(1), false, true)].into_iter()),
            Verdict::Admit
        );
        assert_eq!(
            verdict([(q(0), false, false), (q(1), false, false)].into_iter()),
            Verdict::Deny
        );
        assert_eq!(
            verdict([(Enforced, false, true), (q(1), false, false)].into_iter()),
            Verdict::Deny
        );
        assert_eq!(
            verdict([(Shadow, false, false), (Enforced, true, false)].into_iter()),
            Verdict::OverdraftOnly
        );
    }
}
