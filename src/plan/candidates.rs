//! The candidates pass: the limits each matched descriptor reaches (its rule's, those of
//! `hierarchical` rules passed on the way, or a caller's `limit` override), and the overrides
//! and `replaces` pass that removes what another limit of the request replaces.

use std::borrow::Cow;

use super::matching::Matched;
use super::{DescriptorKind, DescriptorPlan, PlanError};
use crate::algorithm::rule::Role;
use crate::config::{Domain, Rule};
use crate::limit::unit::Unit;
use crate::limit::Limit;
use crate::pb::common::RateLimitDescriptor;
use crate::telemetry::stats::name::StatsBinding;

/// A limit found for a descriptor before `replaces` is applied.
pub(super) struct Candidate<'c> {
    pub descriptor: usize,
    pub limit: Cow<'c, Limit>,
    pub stats: Option<&'c StatsBinding>,
    /// Depth of the rule that owns the limit: its key covers entries `0..=depth`.
    pub depth: usize,
    pub role: Role,
}

/// What the request reaches: every descriptor's plan (its charges not yet placed) and every
/// candidate limit.
pub(super) struct Reached<'c> {
    pub descriptors: Vec<DescriptorPlan<'c>>,
    pub candidates: Vec<Candidate<'c>>,
    /// Names of the limits some limit (or `unlimited` rule) of the request replaces.
    replaced: Vec<&'c str>,
}

impl<'c> Reached<'c> {
    /// The `replaces` pass: a named limit another limit of the request replaces is dropped.
    pub fn drop_replaced(&mut self) {
        let replaced = &self.replaced;
        self.candidates
            .retain(|c| c.limit.name.is_empty() || !replaced.contains(&c.limit.name.as_str()));
    }
}

/// The candidates of every descriptor of `req`, matched as `matched` says.
pub(super) fn collect<'c>(
    domain: &'c Domain,
    descriptors: &[RateLimitDescriptor],
    matched: &[Matched<'c>],
) -> Result<Reached<'c>, PlanError> {
    let mut found = Reached {
        descriptors: Vec::with_capacity(descriptors.len()),
        candidates: Vec::new(),
        replaced: Vec::new(),
    };
    for (i, (d, m)) in descriptors.iter().zip(matched).enumerate() {
        let kind = found.descriptor(domain, i, d, m)?;
        found.descriptors.push(DescriptorPlan {
            kind,
            charges: 0..0,
            quota: m.quota(),
            metadata: m.rule.and_then(|r| r.metadata.as_ref()),
        });
    }
    Ok(found)
}

impl<'c> Reached<'c> {
    /// Descriptor `i`'s candidates: a caller's override (where the domain allows them), an
    /// `unlimited` rule, or its rule's limits and those of the hierarchical rules passed.
    fn descriptor(
        &mut self,
        domain: &'c Domain,
        i: usize,
        d: &RateLimitDescriptor,
        m: &Matched<'c>,
    ) -> Result<DescriptorKind, PlanError> {
        let before = self.candidates.len();
        // `allow_overrides: false`: the configured limits apply whatever the caller sends.
        if let Some(ov) = d.limit.as_ref().filter(|_| domain.policy.allow_overrides) {
            let unit = check_override(i, ov.requests_per_unit, ov.unit)?;
            let limit = Limit::from_override(ov.requests_per_unit, unit, domain.policy.usage);
            self.candidates.push(Candidate {
                descriptor: i,
                limit: Cow::Owned(limit),
                stats: None,
                depth: d.entries.len().saturating_sub(1),
                // The override replaces the rule's limits, not its quota mode.
                role: role_of(i, m.quota(), false),
            });
            // Only the matched rule's own limits: a hierarchical rule passed through on the
            // way (a tenant's, a limit shared by every tenant) still applies.
            self.path_limits(i, d, m, |_| false);
            return Ok(DescriptorKind::Limited);
        }
        if let Some(r) = m.rule.filter(|r| r.unlimited) {
            self.replaced
                .extend(r.unlimited_replaces.iter().map(String::as_str));
            return Ok(DescriptorKind::Unlimited);
        }
        // The matched rule's limits, plus those of hierarchical rules passed through.
        self.path_limits(i, d, m, |depth| depth + 1 == d.entries.len());
        Ok(if self.candidates.len() > before {
            DescriptorKind::Limited
        } else {
            DescriptorKind::NoLimit
        })
    }

    /// The limits of the rule on `m`'s path that `own(depth)` selects, and of every
    /// hierarchical rule passed above the descriptor's depth, as candidates, with what they
    /// replace.
    fn path_limits(
        &mut self,
        i: usize,
        d: &RateLimitDescriptor,
        m: &Matched<'c>,
        own: impl Fn(usize) -> bool,
    ) {
        let quota = m.quota();
        for (depth, r) in m.path.iter().enumerate() {
            let takes = if own(depth) {
                true
            } else {
                r.hierarchical && depth + 1 < d.entries.len()
            };
            if takes {
                self.add_limits(i, depth, r, role_of(i, quota, r.shadow_mode));
            }
        }
    }

    /// Rule `r`'s limits (at `depth` of descriptor `i`'s path), and what they replace.
    fn add_limits(&mut self, i: usize, depth: usize, r: &'c Rule, role: Role) {
        for limit in &r.limits {
            self.replaced
                .extend(limit.replaces.iter().map(String::as_str));
            self.candidates.push(Candidate {
                descriptor: i,
                limit: Cow::Borrowed(limit.as_ref()),
                stats: r.stats.as_deref(),
                depth,
                role,
            });
        }
    }
}

/// A limit's role: shadow first, then the descriptor's quota mode, else enforced.
fn role_of(descriptor: usize, quota: bool, shadow: bool) -> Role {
    match (shadow, quota) {
        (true, _) => Role::Shadow,
        (false, true) => Role::Quota {
            descriptor: descriptor as u32,
        },
        (false, false) => Role::Enforced,
    }
}

fn check_override(descriptor: usize, requests_per_unit: u32, unit: i32) -> Result<Unit, PlanError> {
    let Some(unit) = Unit::from_proto(unit) else {
        return Err(PlanError::OverrideUnit { descriptor, unit });
    };
    if requests_per_unit == 0 {
        return Err(PlanError::OverrideZero { descriptor });
    }
    Ok(unit)
}
