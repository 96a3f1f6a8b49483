//! Placement groups: a request's charges split by hash tag. Every key of a group lives in one
//! Redis Cluster slot, so one script call decides and charges the group atomically.
//!
//! Order is fixed for every request: descriptor groups first, then shared (global) limits,
//! each in order of first appearance. Pure, so it is unit-tested here.

use crate::plan::{Charge, Role};

/// Charges sharing a hash tag, with their distinct keys.
#[derive(Debug, PartialEq, Eq)]
pub struct Group {
    /// Distinct counter keys (without the store's prefix), in order of first use.
    pub keys: Vec<String>,
    /// Indexes into the request's charges.
    pub charges: Vec<usize>,
    /// Per charge, its key's index in `keys`.
    pub key_of: Vec<usize>,
    /// A shared limit's group: one key every request of every value touches.
    pub shared: bool,
}

/// Groups charges by hash tag: descriptor groups first, shared limits last, each in order of
/// first appearance.
pub fn placement_groups(charges: &[Charge<'_>]) -> Vec<Group> {
    let mut groups: Vec<(&str, Group)> = Vec::new();
    for (ci, c) in charges.iter().enumerate() {
        let tag = c.tag();
        let gi = match groups.iter().position(|(t, _)| *t == tag) {
            Some(i) => i,
            None => {
                groups.push((
                    tag,
                    Group {
                        keys: Vec::new(),
                        charges: Vec::new(),
                        key_of: Vec::new(),
                        shared: c.limit.shared,
                    },
                ));
                groups.len() - 1
            }
        };
        let g = &mut groups[gi].1;
        let key = match g.keys.iter().position(|k| *k == c.key) {
            Some(k) => k,
            None => {
                g.keys.push(c.key.clone());
                g.keys.len() - 1
            }
        };
        g.charges.push(ci);
        g.key_of.push(key);
    }
    let mut groups: Vec<Group> = groups.into_iter().map(|(_, g)| g).collect();
    groups.sort_by_key(|g| g.shared);
    groups
}

/// How many distinct quota descriptors the request has.
pub fn quota_descriptors(charges: &[Charge<'_>]) -> usize {
    let mut seen: Vec<u32> = Vec::new();
    for c in charges {
        if let Role::Quota { descriptor } = c.role {
            if !seen.contains(&descriptor) {
                seen.push(descriptor);
            }
        }
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::limit::{Limit, Unit};

    fn charge(descriptor: usize, key: &str, shared: bool, role: Role) -> Charge<'static> {
        let mut limit = Limit::from_override(10, Unit::Minute);
        limit.shared = shared;
        Charge {
            descriptor,
            limit: Cow::Owned(limit),
            key: key.to_string(),
            cost: 1,
            role,
        }
    }

    #[test]
    fn groups_follow_hash_tags_with_shared_limits_last() {
        let e = Role::Enforced;
        let charges = [
            charge(0, "{d|g=*|*}|f60", true, e),
            charge(0, "{d|t=a}|f60", false, e),
            charge(0, "{d|t=a}|m=x|f60", false, e),
            charge(1, "{d|t=b}|f60", false, e),
            charge(1, "{d|t=a}|f60", false, e),
        ];
        let groups = placement_groups(&charges);
        assert_eq!(
            groups,
            vec![
                Group {
                    keys: vec!["{d|t=a}|f60".into(), "{d|t=a}|m=x|f60".into()],
                    charges: vec![1, 2, 4],
                    key_of: vec![0, 1, 0],
                    shared: false,
                },
                Group {
                    keys: vec!["{d|t=b}|f60".into()],
                    charges: vec![3],
                    key_of: vec![0],
                    shared: false,
                },
                Group {
                    keys: vec!["{d|g=*|*}|f60".into()],
                    charges: vec![0],
                    key_of: vec![0],
                    shared: true,
                },
            ]
        );
    }

    #[test]
    fn shared_comes_from_the_limit_not_the_key() {
        // A value that ends in `|*` after unescaping must not make a group shared.
        let charges = [charge(0, "{d|k=v%7C%2A}|f60", false, Role::Enforced)];
        assert!(!placement_groups(&charges)[0].shared);
    }

    #[test]
    fn quota_descriptors_are_counted_once_each() {
        let q = |d| Role::Quota { descriptor: d };
        let charges = [
            charge(0, "{a}|1", false, q(0)),
            charge(0, "{a}|2", false, q(0)),
            charge(1, "{b}|1", false, Role::Enforced),
            charge(2, "{c}|1", false, q(2)),
        ];
        assert_eq!(quota_descriptors(&charges), 2);
        assert_eq!(quota_descriptors(&[]), 0);
    }
}
