//! From a plan and what the store answered per charge to the answer: a code, the deciding
//! limit, what remains and the honest wait, per descriptor, plus the overall code. Pure;
//! [`crate::service::respond`] maps it to protobuf.
//!
//! **The one denial rule** ([`verdict`]), used by every store to decide what lands and by
//! [`assemble`] for the overall code, on the normal path and the store-failure path alike:
//! - a descriptor is over when one of its enforced (non-shadow) limits denies;
//! - the request is over when a non-quota descriptor is over, or when it has quota
//!   descriptors and every one of them is over (a quota descriptor with no enforced limit —
//!   shadow, `unlimited`, all replaced — is never over, so then quota never denies);
//! - an allowed request charges every limit that had room (and every overdraft limit); a
//!   request over only because of overdraft limits charges only those (usage already spent
//!   is recorded); any other over request charges nothing.
//!
//! **The one reporting rule**: an OVER_LIMIT status reports `limit_remaining` 0; an OK status
//! reports what remains after the request (for a request that charged nothing: as it
//! stands). The deciding limit of a descriptor is, when over, the denying limit with the
//! longest wait (a wait of "never" is longest); when OK, the limit with the least remaining.

use crate::algorithm::rule::Role;
use crate::algorithm::rule::{verdict, ChargeOutcome, Verdict};
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
    /// `None`: no limit, a cost that can never fit, or no store answer.
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

/// The verdict of a planned request from its outcomes.
pub fn plan_verdict(plan: &Plan<'_>, outcomes: &[ChargeOutcome]) -> Verdict {
    verdict(
        plan.charges
            .iter()
            .zip(outcomes)
            .map(|(c, o)| (c.role, c.limit.params.overdraft, o.allowed)),
        plan.quota_descriptors,
    )
}

/// Assembles the answer. `global_shadow` reports real statuses but an overall OK.
pub fn assemble<'p>(
    plan: &'p Plan<'_>,
    outcomes: &[ChargeOutcome],
    global_shadow: bool,
) -> Decision<'p> {
    let statuses = plan
        .descriptors
        .iter()
        .map(|d| match d.kind {
            DescriptorKind::NoLimit => unlimited_status(0),
            DescriptorKind::Unlimited => unlimited_status(u32::MAX),
            DescriptorKind::Limited => descriptor_status(plan, d.charges.clone(), outcomes),
        })
        .collect();
    let over = plan_verdict(plan, outcomes).is_over();
    let shadow_denied = plan
        .charges
        .iter()
        .zip(outcomes)
        .any(|(c, o)| c.role == Role::Shadow && !o.allowed && !c.limit.params.is_pool_part());
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

/// The answer when the store could not decide and the failure policy answers for it:
/// every limit allows (`allow`) or denies (`deny`), and the one rule above turns that into
/// statuses and the overall code (so shadow limits never deny and quota works as always).
pub fn on_store_failure<'p>(plan: &'p Plan<'_>, allow: bool, global_shadow: bool) -> Decision<'p> {
    let outcomes = vec![
        ChargeOutcome {
            allowed: allow,
            remaining: 0,
            wait_us: None,
        };
        plan.charges.len()
    ];
    let mut d = assemble(plan, &outcomes, global_shadow);
    for s in &mut d.statuses {
        // No store answer says the cost can never fit.
        s.unsatisfiable = false;
    }
    d
}

/// The answer to a request refused before any store was asked (a reservation without an
/// estimate, in a domain without a default): the descriptors at `refused` are OVER_LIMIT
/// with no limit, the others OK with none; nothing was charged.
pub fn refused<'p>(plan: &'p Plan<'_>, refused: &[usize], global_shadow: bool) -> Decision<'p> {
    let statuses = (0..plan.descriptors.len())
        .map(|i| match refused.contains(&i) {
            true => Status {
                code: Code::OverLimit,
                limit: None,
                remaining: 0,
                wait_us: None,
                unsatisfiable: false,
            },
            false => unlimited_status(0),
        })
        .collect();
    Decision {
        overall: if global_shadow {
            Code::Ok
        } else {
            Code::OverLimit
        },
        statuses,
        shadowed: global_shadow,
    }
}

fn unlimited_status<'p>(remaining: u32) -> Status<'p> {
    Status {
        code: Code::Ok,
        limit: None,
        remaining,
        wait_us: None,
        unsatisfiable: false,
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
    let over = (0..charges.len()).filter(denied).max_by_key(wait_rank);
    let (code, pick) = match over {
        Some(i) => (Code::OverLimit, i),
        // An admitted class of a pool's shares reports through its pool: a class past its
        // guarantee has nothing "remaining" of it, yet borrows.
        None => (
            Code::Ok,
            (0..charges.len())
                .filter(|&i| !charges[i].limit.params.is_pool_part())
                .min_by_key(|&i| outs[i].remaining)
                .unwrap_or(0),
        ),
    };
    let o = outs[pick];
    Status {
        code,
        limit: Some(charges[pick].limit.as_ref()),
        remaining: match code {
            Code::OverLimit => 0,
            Code::Ok => o.remaining.min(u32::MAX as u64) as u32,
        },
        wait_us: o.wait_us,
        unsatisfiable: code == Code::OverLimit && o.wait_us.is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: Role = Role::Enforced;
    const S: Role = Role::Shadow;

    fn q(d: u32) -> Role {
        Role::Quota { descriptor: d }
    }

    #[test]
    fn the_denial_rule() {
        use Verdict::*;
        // (charges as (role, overdraft, allowed), quota descriptors, verdict)
        type Row = (Vec<(Role, bool, bool)>, usize, Verdict);
        let table: Vec<Row> = vec![
            (vec![(E, false, true)], 0, Admit),
            (vec![(E, false, false)], 0, Deny),
            (vec![(S, false, false)], 0, Admit),
            (vec![(E, true, false)], 0, OverdraftOnly),
            (vec![(E, true, false), (E, false, false)], 0, Deny),
            // Quota: over only when every quota descriptor is.
            (vec![(q(0), false, false), (q(1), false, true)], 2, Admit),
            (vec![(q(0), false, false), (q(1), false, false)], 2, Deny),
            // A quota descriptor is over when one of its limits denies.
            (vec![(q(0), false, true), (q(0), false, false)], 1, Deny),
            // A quota descriptor with no enforced limit is never over.
            (vec![(q(1), false, false)], 2, Admit),
            (vec![(E, false, true), (q(1), false, false)], 1, Deny),
            (
                vec![(q(0), true, false), (q(1), false, false)],
                2,
                OverdraftOnly,
            ),
            (vec![(q(0), true, false), (q(0), false, false)], 1, Deny),
            (vec![(S, false, false), (E, true, false)], 0, OverdraftOnly),
        ];
        for (charges, quota, want) in table {
            assert_eq!(
                verdict(charges.iter().copied(), quota),
                want,
                "{charges:?} with {quota} quota descriptors"
            );
        }
    }
}
