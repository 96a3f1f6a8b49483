//! `plan`: a request planned against the config as a sequence of passes, each in a file of its
//! own: match each descriptor ([`super::matching`]), collect the limits it reaches and apply
//! overrides and `replaces` ([`super::candidates`]), build the counter keys ([`super::keys`]),
//! price `spend:` charges ([`super::price`]), and add what a divided pool charges beside it
//! (a class's counter, [`super::shares`]; a tenant's and the active count, [`super::fair`]).

use super::candidates;
use super::fair;
use super::keys;
use super::matching;
use super::price;
use super::shares;
use super::{DescriptorKind, DescriptorPlan, Plan, PlanError, PlannedCharge};
use crate::config::{Config, Domain};
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::RateLimitRequest;

pub fn plan<'c>(config: &'c Config, req: &RateLimitRequest) -> Result<Plan<'c>, PlanError> {
    let Some(domain) = config.domains.get(&req.domain) else {
        return Ok(Plan::no_limits(req.descriptors.len()));
    };
    check_max_hits(domain, req)?;
    let matched = matching::match_all(&domain.root, req);
    let mut found = candidates::collect(domain, &req.descriptors, &matched)?;
    found.drop_replaced();
    let depths = keys::tag_depths(&matched, &found.candidates);
    let mut planned = Planned::new(found.descriptors, found.candidates.len());
    for c in found.candidates {
        let d = &req.descriptors[c.descriptor];
        let key = keys::counter_key_of(&domain.name, d, &matched, &depths, &c);
        let count = count(req, c.descriptor);
        let cost = price::cost(domain.prices.as_ref(), d, &c.limit, count).unwrap_or_else(|| {
            planned.unpriced(c.descriptor);
            0
        });
        let charge = PlannedCharge {
            descriptor: c.descriptor,
            limit: c.limit,
            stats: c.stats,
            key,
            cost,
            role: c.role,
        };
        planned.push(charge, d);
    }
    Ok(planned.finish())
}

/// Descriptor `i`'s count: its `hits_addend`, else the request's (at least 1).
fn count(req: &RateLimitRequest, i: usize) -> u64 {
    match req.descriptors[i].hits_addend {
        Some(h) => h,
        None => u64::from(req.hits_addend.max(1)),
    }
}

/// No descriptor's count above the domain's `max_hits`.
fn check_max_hits(domain: &Domain, req: &RateLimitRequest) -> Result<(), PlanError> {
    let Some(max) = domain.policy.max_hits else {
        return Ok(());
    };
    match (0..req.descriptors.len()).find(|&i| count(req, i) > max) {
        Some(i) => Err(PlanError::OverMaxHits {
            descriptor: i,
            hits: count(req, i),
            domain: domain.name.clone(),
            max,
        }),
        None => Ok(()),
    }
}

/// The plan as the charges are added, each descriptor's charges a contiguous range.
struct Planned<'c> {
    descriptors: Vec<DescriptorPlan<'c>>,
    charges: Vec<PlannedCharge<'c>>,
    unpriced: Vec<usize>,
}

impl<'c> Planned<'c> {
    fn new(descriptors: Vec<DescriptorPlan<'c>>, charges: usize) -> Planned<'c> {
        Planned {
            descriptors,
            charges: Vec::with_capacity(charges),
            unpriced: Vec::new(),
        }
    }

    /// A descriptor a `spend:` limit cannot price: the request is refused.
    fn unpriced(&mut self, descriptor: usize) {
        if !self.unpriced.contains(&descriptor) {
            self.unpriced.push(descriptor);
        }
    }

    /// Adds `charge` and what its pool charges beside it (companions follow their pool).
    fn push(&mut self, charge: PlannedCharge<'c>, d: &RateLimitDescriptor) {
        let class = shares::class_charge(&charge, d);
        let fair = fair::tenant_charges(&charge, d);
        let range = &mut self.descriptors[charge.descriptor].charges;
        if range.start == range.end {
            *range = self.charges.len()..self.charges.len();
        }
        self.charges.push(charge);
        self.charges.extend(class);
        self.charges.extend(fair.into_iter().flatten());
        range.end = self.charges.len();
    }

    fn finish(mut self) -> Plan<'c> {
        for dp in &mut self.descriptors {
            if dp.kind == DescriptorKind::Limited && dp.charges.is_empty() {
                dp.kind = DescriptorKind::NoLimit;
            }
        }
        let quota_descriptors = self.descriptors.iter().filter(|d| d.quota).count();
        Plan {
            descriptors: self.descriptors,
            charges: self.charges,
            quota_descriptors,
            slot: (0, 0),
            unpriced: self.unpriced,
            due: None,
        }
    }
}
