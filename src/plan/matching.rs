//! The match pass: each descriptor walked down the domain's match tree as envoyproxy/ratelimit
//! walks it (exact beats wildcard beats key-only; no backtracking).

use crate::config::{Level, Rule};
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::RateLimitRequest;

/// Where one descriptor landed in the match tree.
pub(super) struct Matched<'c> {
    /// The rules matched level by level, from the first entry.
    pub path: Vec<&'c Rule>,
    /// The rule at the descriptor's own depth, when every entry matched one.
    pub rule: Option<&'c Rule>,
}

impl Matched<'_> {
    /// `quota_mode` on the matched rule.
    pub fn quota(&self) -> bool {
        self.rule.is_some_and(|r| r.quota_mode)
    }
}

/// Every descriptor of `req`, matched.
pub(super) fn match_all<'c>(root: &'c Level, req: &RateLimitRequest) -> Vec<Matched<'c>> {
    req.descriptors
        .iter()
        .map(|d| {
            let path = match_path(root, d);
            let matched = !d.entries.is_empty() && path.len() == d.entries.len();
            let rule = if matched { path.last().copied() } else { None };
            Matched { path, rule }
        })
        .collect()
}

/// The rules matched level by level, stopping at the first entry with no rule or at a
/// rule without children (envoyproxy/ratelimit never backtracks).
fn match_path<'c>(root: &'c Level, d: &RateLimitDescriptor) -> Vec<&'c Rule> {
    let mut path = Vec::with_capacity(d.entries.len());
    let mut level = root;
    for e in &d.entries {
        let Some(rule) = level.lookup(&e.key, &e.value) else {
            break;
        };
        path.push(rule);
        level = &rule.children;
        if level.is_empty() {
            break;
        }
    }
    path
}
