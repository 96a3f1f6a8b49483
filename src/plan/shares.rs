//! A pool divided by class (`shares:`): the request's class is charged beside the pool, on a
//! key in the pool's hash slot (docs/configuration.md, "Sharing a pool").

use super::PlannedCharge;
use crate::limit::{Class, Shares, CLASS_MARK};
use crate::pb::common::RateLimitDescriptor;

/// The charge of `d`'s class beside `pool`'s, when its limit has shares.
pub(super) fn class_charge<'c>(
    pool: &PlannedCharge<'c>,
    d: &RateLimitDescriptor,
) -> Option<PlannedCharge<'c>> {
    let class = &class_of(pool.limit.shares.as_deref()?, d).limit;
    let name = class.key_suffix.rsplit(CLASS_MARK).next().unwrap_or("");
    let suffix = format!("{CLASS_MARK}{name}");
    pool.beside(
        |l| l.shares.as_deref().map(|sh| &class_of(sh, d).limit),
        &suffix,
        pool.cost,
        pool.role,
    )
}

/// The class of a pool's shares a descriptor names.
fn class_of<'s>(shares: &'s Shares, d: &RateLimitDescriptor) -> &'s Class {
    shares.class_of(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
}
