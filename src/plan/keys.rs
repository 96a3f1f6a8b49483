//! The keys pass: each candidate's counter key ([`super::counter_key`]), its hash tag as deep
//! as its descriptor's tag depth.

use super::candidates::Candidate;
use super::counter_key::counter_key;
use super::matching::Matched;
use crate::config::{Pattern, Rule};
use crate::pb::common::RateLimitDescriptor;

/// Each descriptor's hash-tag depth ([`tag_depth`]), given every candidate of the request.
pub(super) fn tag_depths(matched: &[Matched<'_>], candidates: &[Candidate<'_>]) -> Vec<usize> {
    matched
        .iter()
        .enumerate()
        .map(|(i, m)| tag_depth(&m.path, candidates.iter().filter(|c| c.descriptor == i)))
        .collect()
}

/// Candidate `c`'s counter key, for its descriptor `d`.
pub(super) fn counter_key_of(
    domain: &str,
    d: &RateLimitDescriptor,
    matched: &[Matched<'_>],
    depths: &[usize],
    c: &Candidate<'_>,
) -> String {
    let i = c.descriptor;
    counter_key(domain, d, &matched[i].path, c.depth, depths[i], &c.limit)
}

/// How many leading entries (`0..=depth`) a descriptor's hash tag covers: down to the first
/// level whose rule gives every value a counter of its own (a key-only or wildcard rule, not
/// `share_threshold`), so a constant first entry (`tier=free`, `generic_key=api`) does not put
/// every tenant or address on one Redis hash slot; but never deeper than the shallowest counter the
/// descriptor charges (`shared` ones aside, they have tags of their own), so all of one
/// descriptor's counters still share a hash slot and one script decides them atomically.
fn tag_depth<'a, 'c: 'a>(
    path: &[&Rule],
    charges: impl Iterator<Item = &'a Candidate<'c>>,
) -> usize {
    let per_value = path.iter().position(|r| {
        !r.share_threshold && matches!(r.pattern, Pattern::Any | Pattern::Wildcard(_))
    });
    let shallowest = charges.filter(|c| !c.limit.shared).map(|c| c.depth).min();
    per_value
        .unwrap_or(usize::MAX)
        .min(shallowest.unwrap_or(usize::MAX))
        .min(path.len().saturating_sub(1))
}
