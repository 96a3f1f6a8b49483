//! Placement groups: a request's charges split by hash tag. Every key of a group lives in one
//! Redis Cluster hash slot, so one script call decides and charges the group atomically; the
//! memory store decides the same groups the same way (see [`super::protocol`]). On one Redis
//! node every key is in one place, so a request's charges form one group there (leased shared
//! limits aside, which the Redis store answers from its leases).
//!
//! Order is fixed for every request: descriptor groups first, then shared (global) limits,
//! each in order of first appearance. Pure, so it is unit-tested here.

use std::borrow::Cow;

use crate::algorithm::concurrency::SlotId;
use crate::algorithm::rule::Role;
use crate::limit::LimitParams;
use crate::plan::Plan;

/// A charge as placed (second stage, after [`crate::plan::PlannedCharge`]): what a store runs,
/// its key with the store's prefix, the limit's numbers and the lease. The Redis store owns its keys (its decisions outlive the
/// request future, so that a charge that lands late is still refunded); the memory store
/// borrows them from the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedCharge<'a> {
    /// The counter key, with the store's prefix.
    pub key: Cow<'a, str>,
    pub params: LimitParams,
    pub cost: u64,
    pub role: Role,
    /// Units the Redis store leases at a time for this charge (`lease` of a shared limit,
    /// enforced charges only); 0: none.
    pub lease: u64,
}

/// Charges sharing a hash tag, with their distinct keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Per distinct key of the group, the placed charge that names it.
    pub keys: Vec<usize>,
    /// The group's charges (indexes into `Placed::charges`), in request order.
    pub charges: Vec<usize>,
    /// Per charge, its key's index in `keys`.
    pub key_of: Vec<usize>,
    /// A shared limit's group: one key every request of every value touches.
    pub shared: bool,
}

impl Group {
    /// For a class's charge (`borrow_until > 0`), its pool's counter: the index in `keys` of
    /// the key its own key extends with [`CLASS_MARK`](crate::limit::CLASS_MARK). `None` for any other charge, or when
    /// the pool is not charged in this group (the class then never borrows).
    /// A tenant's charge of a fair share (`fair_floor > 0`) finds its pool the same way, by
    /// [`TENANT_MARK`](crate::limit::TENANT_MARK) (the tenant, a request's value, may hold
    /// either mark: the pool is the key of an ordinary charge its key extends).
    pub fn pool_of(&self, specs: &[PlacedCharge<'_>], spec: &PlacedCharge<'_>) -> Option<usize> {
        if spec.params.borrow_until == 0 {
            return None;
        }
        if spec.params.fair_floor > 0 {
            let mark = crate::limit::TENANT_MARK;
            return self.keys.iter().position(|&k| {
                let pool = &specs[k];
                !pool.params.is_pool_part()
                    && spec.key.len() >= pool.key.len() + mark.len()
                    && spec.key.starts_with(&*pool.key)
                    && spec.key[pool.key.len()..].starts_with(mark)
            });
        }
        let (pool, _) = spec.key.rsplit_once(crate::limit::CLASS_MARK)?;
        self.keys.iter().position(|&k| specs[k].key == pool)
    }

    /// The group of one shared charge on its own key (charge 0): a lease's top-up or refund.
    pub fn one_shared() -> Group {
        Group {
            keys: vec![0],
            charges: vec![0],
            key_of: vec![0],
            shared: true,
        }
    }
}

/// A request laid out in placement groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed<'a> {
    pub charges: Vec<PlacedCharge<'a>>,
    pub groups: Vec<Group>,
    /// Quota descriptors in the whole request.
    pub quota_descriptors: usize,
    /// The request's concurrency slot id (`(0, 0)`: it takes none).
    pub slot: SlotId,
}

/// Where a store's keys live, which decides what one script call may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A hash slot per hash tag (Redis Cluster; the memory store answers as a cluster does): a
    /// group per tag.
    ByTag,
    /// One node (a single Redis, Sentinel's primary): every charge in one group, which one
    /// script call decides all-or-nothing, with nothing to refund; a leased shared limit
    /// keeps a group of its own.
    OneNode,
}

/// Groups `plan`'s charges by hash tag (or, on one node, together), keys prefixed with
/// `prefix` (owned keys when there is a prefix): descriptor groups first, shared limits last,
/// each in order of first appearance.
pub fn place<'a>(plan: &'a Plan<'_>, prefix: &str, layout: Layout) -> Placed<'a> {
    // Per group, its tag (None: the one-node group).
    let mut tags: Vec<Option<&str>> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut specs = Vec::with_capacity(plan.charges.len());
    for (ci, c) in plan.charges.iter().enumerate() {
        let by_tag = layout == Layout::ByTag || (c.limit.shared && c.limit.lease > 0);
        let tag = by_tag.then(|| c.tag());
        let gi = match tags.iter().position(|t| *t == tag) {
            Some(i) => i,
            None => {
                tags.push(tag);
                groups.push(Group {
                    keys: Vec::new(),
                    charges: Vec::new(),
                    key_of: Vec::new(),
                    shared: by_tag && c.limit.shared,
                });
                groups.len() - 1
            }
        };
        let g = &mut groups[gi];
        let key = match g.keys.iter().position(|&k| plan.charges[k].key == c.key) {
            Some(k) => k,
            None => {
                g.keys.push(ci);
                g.keys.len() - 1
            }
        };
        g.charges.push(ci);
        g.key_of.push(key);
        let key = if prefix.is_empty() {
            Cow::Borrowed(c.key.as_str())
        } else {
            let mut key = String::with_capacity(prefix.len() + c.key.len());
            key.push_str(prefix);
            key.push_str(&c.key);
            Cow::Owned(key)
        };
        specs.push(PlacedCharge {
            key,
            params: c.limit.params,
            cost: c.cost,
            role: c.role,
            lease: if c.role == Role::Enforced {
                c.limit.lease
            } else {
                0
            },
        });
    }
    groups.sort_by_key(|g| g.shared);
    Placed {
        charges: specs,
        groups,
        quota_descriptors: plan.quota_descriptors,
        slot: plan.slot,
    }
}

impl Placed<'_> {
    /// The same layout with owned keys.
    pub fn into_owned(self) -> Placed<'static> {
        Placed {
            charges: self
                .charges
                .into_iter()
                .map(|s| PlacedCharge {
                    key: Cow::Owned(s.key.into_owned()),
                    params: s.params,
                    cost: s.cost,
                    role: s.role,
                    lease: s.lease,
                })
                .collect(),
            groups: self.groups,
            quota_descriptors: self.quota_descriptors,
            slot: self.slot,
        }
    }
}

/// The key of the reservation record of group `gi` (see `algorithm::reservation`): beside the
/// group's first key, in its hash slot (its hash tag; on one node, where the group is the whole
/// request, the first key's), `<prefix>{tag}|rsv:<id>`. No counter key ends like it (a
/// counter's last part is its limit's shape, which never holds `:`).
pub fn record_key(placed: &Placed<'_>, gi: usize) -> String {
    record_key_of(&placed.charges[placed.groups[gi].keys[0]].key, placed.slot)
}

/// How long a group's reservation record lives: twice its longest window (a calendar
/// period's nominal length), so a settle of a reservation whose window has just ended still
/// finds it, to land an excess in the window that holds now.
pub fn record_life_us(g: &Group, charges: &[PlacedCharge<'_>]) -> u64 {
    let longest = g
        .charges
        .iter()
        .map(|&ci| &charges[ci].params)
        .filter(|p| p.algorithm != crate::limit::Algorithm::Concurrency)
        .map(|p| p.window_us)
        .max()
        .unwrap_or(0);
    longest.saturating_mul(2).max(1_000_000)
}

/// [`record_key`] of a group whose first key is `first`, for the request id `id`.
pub fn record_key_of(first: &str, id: SlotId) -> String {
    let head = first.find('}').map_or(first, |end| &first[..=end]);
    format!("{head}|rsv:{:x}.{:x}", id.0, id.1)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::limit::unit::Unit;
    use crate::limit::Limit;
    use crate::plan::{DescriptorKind, DescriptorPlan, PlannedCharge};

    /// A one-unit charge of a 10-a-minute limit on `key`.
    pub(crate) fn charge(key: &str, shared: bool) -> PlannedCharge<'static> {
        let mut limit = Limit::from_override(10, Unit::Minute, false);
        limit.shared = shared;
        PlannedCharge {
            descriptor: 0,
            limit: Cow::Owned(limit),
            stats: None,
            key: key.to_string(),
            cost: 1,
            role: Role::Enforced,
        }
    }

    /// One limited descriptor holding `charges`.
    pub(crate) fn plan(charges: Vec<PlannedCharge<'static>>) -> Plan<'static> {
        Plan {
            descriptors: vec![DescriptorPlan {
                kind: DescriptorKind::Limited,
                charges: 0..charges.len(),
                quota: false,
                metadata: None,
            }],
            charges,
            quota_descriptors: 0,
            slot: (0, 0),
            unpriced: Vec::new(),
            due: None,
        }
    }

    #[test]
    fn groups_follow_hash_tags_with_shared_limits_last() {
        let plan = plan(vec![
            charge("{d|g=*|*}|f60", true),
            charge("{d|t=a}|f60", false),
            charge("{d|t=a}|m=x|f60", false),
            charge("{d|t=b}|f60", false),
            charge("{d|t=a}|f60", false),
        ]);
        let placed = place(&plan, "tg:2:", Layout::ByTag);
        assert_eq!(placed.charges[1].key, "tg:2:{d|t=a}|f60");
        assert_eq!(
            placed.groups,
            vec![
                Group {
                    keys: vec![1, 2],
                    charges: vec![1, 2, 4],
                    key_of: vec![0, 1, 0],
                    shared: false,
                },
                Group {
                    keys: vec![3],
                    charges: vec![3],
                    key_of: vec![0],
                    shared: false,
                },
                Group {
                    keys: vec![0],
                    charges: vec![0],
                    key_of: vec![0],
                    shared: true,
                },
            ]
        );
    }

    #[test]
    fn one_node_puts_every_charge_in_one_group_but_a_leased_shared_limit() {
        let mut leased = charge("{d|l=*|*}|f60", true);
        leased.limit.to_mut().lease = 10;
        let plan = plan(vec![
            charge("{d|g=*|*}|f60", true),
            charge("{d|t=a}|f60", false),
            leased,
            charge("{d|t=b}|f60", false),
            charge("{d|t=a}|f60", false),
        ]);
        let placed = place(&plan, "", Layout::OneNode);
        assert_eq!(
            placed.groups,
            vec![
                Group {
                    keys: vec![0, 1, 3],
                    charges: vec![0, 1, 3, 4],
                    key_of: vec![0, 1, 2, 1],
                    shared: false,
                },
                Group {
                    keys: vec![2],
                    charges: vec![2],
                    key_of: vec![0],
                    shared: true,
                },
            ]
        );
    }

    #[test]
    fn shared_comes_from_the_limit_not_the_key() {
        // A value that ends in `|*` once unescaped must not make a group shared.
        let plan = plan(vec![charge("{d|k=v%7C%2A}|f60", false)]);
        let placed = place(&plan, "", Layout::ByTag);
        assert!(!placed.groups[0].shared);
    }
}
