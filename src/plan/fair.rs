//! A pool's fair share among its active tenants (`fair_share:`): the request's tenant and the
//! pool's count of active tenants are charged beside the pool (the count right after the
//! tenant, as the batch expects), on keys in the pool's hash slot.

use super::PlannedCharge;
use crate::algorithm::rule::Role;
use crate::limit::{FairShare, ACTIVE_MARK, TENANT_MARK};
use crate::pb::common::RateLimitDescriptor;

/// The charges of `d`'s tenant and of the active count beside `pool`'s, when its limit has a
/// fair share.
pub(super) fn tenant_charges<'c>(
    pool: &PlannedCharge<'c>,
    d: &RateLimitDescriptor,
) -> Option<[PlannedCharge<'c>; 2]> {
    let tenant = tenant_of(pool.limit.fair_share.as_deref()?, d);
    let suffix = format!("{TENANT_MARK}{tenant}");
    let mine = pool.beside(
        |l| l.fair_share.as_deref().map(|f| &f.tenant),
        &suffix,
        pool.cost,
        pool.role,
    )?;
    // A count, not a charge: it never denies, and costs nothing.
    let active = pool.beside(
        |l| l.fair_share.as_deref().map(|f| &f.active),
        ACTIVE_MARK,
        0,
        Role::Shadow,
    )?;
    Some([mine, active])
}

/// The tenant of a pool's fair share a descriptor names.
fn tenant_of<'d>(fair: &FairShare, d: &'d RateLimitDescriptor) -> &'d str {
    fair.tenant_of(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
}
