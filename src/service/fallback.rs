//! `--failure-mode local`: while the store cannot decide, an in-process limiter does, each
//! limit shared out among `--local-fallback-share` replicas (docs/redis.md).

use std::borrow::Cow;

use crate::plan::{Plan, PlannedCharge};

/// `plan` with every limit shared out among `share` replicas: `max(1, limit / share)` (and
/// the same for a token bucket's burst and a class's `borrow_until`), none waiting, as the response reports it. A limit of 0 (deny
/// everything) stays 0.
pub fn shared_out<'c>(plan: &Plan<'c>, share: u32) -> Plan<'c> {
    let charges = plan
        .charges
        .iter()
        .map(|c| {
            let mut limit = c.limit.as_ref().clone();
            let part = |n: u64| match n {
                _ if c.limit.global.is_some() => 0, // only what home granted: none here
                0 => 0,
                n => (n / u64::from(share)).max(1),
            };
            // The count of a pool's active tenants counts tenants, not units: it stays.
            if limit.params.fair_cap == 0 {
                limit.params.limit = part(limit.params.limit);
                limit.params.burst = part(limit.params.burst);
            }
            limit.params.borrow_until = part(limit.params.borrow_until);
            limit.params.fair_floor = part(limit.params.fair_floor);
            // Nothing holds a fallback's answer: it never waits.
            limit.params.max_wait_us = 0;
            limit.requests_per_unit = part(u64::from(limit.requests_per_unit)) as u32;
            PlannedCharge {
                limit: Cow::Owned(limit),
                key: c.key.clone(),
                ..c.clone()
            }
        })
        .collect();
    Plan {
        descriptors: plan.descriptors.clone(),
        charges,
        quota_descriptors: plan.quota_descriptors,
        slot: plan.slot,
        unpriced: plan.unpriced.clone(),
        due: plan.due,
    }
}
