//! The names a rule's statistics take: envoyproxy/ratelimit's key for a rule is the domain,
//! then each level's `key` or `key_value` as written in the config, joined by `.` (the rule's
//! `full_key`). A [`StatsBinding`] holds a rule's counters and, for rules whose name takes the
//! request's values, how that name is built (`config::bind` makes one per rule when a config
//! is compiled, so a decision builds no name otherwise):
//!
//! - `detailed_metric: true`: every level as the request's `key_value` (a level with
//!   `share_threshold` keeps its pattern);
//! - `value_to_metric: true` on a level matched without an exact value: the request's value
//!   at that level;
//! - a limit override in the request: the descriptor's `key_value` entries.
//!
//! Names are sanitized as envoyproxy/ratelimit does ([`super::registry::sanitize`]).

use std::sync::Arc;

use super::registry::{sanitize, RuleStats, Statistics};
use crate::pb::common::rate_limit_descriptor::Entry;

/// Which statistics a rule's limits count into.
#[derive(Debug)]
pub struct StatsBinding {
    /// Under the rule's own key.
    pub fixed: Arc<RuleStats>,
    /// Set when the name takes request values.
    dynamic: Option<DynamicName>,
}

impl PartialEq for StatsBinding {
    fn eq(&self, other: &StatsBinding) -> bool {
        Arc::ptr_eq(&self.fixed, &other.fixed) && self.dynamic == other.dynamic
    }
}

/// A name built per request: the domain, then one segment per level.
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicName {
    pub domain: String,
    pub segments: Vec<Segment>,
}

/// One level of a name built per request.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// As the config writes it (`key`, `key_value`, `key_prefix*`).
    Fixed(String),
    /// The request's entry at this level: `key_value`, or `key` when the value is empty
    /// (`key_` with `underscore`, as `detailed_metric` writes it).
    Value { underscore: bool },
}

impl StatsBinding {
    pub fn new(fixed: Arc<RuleStats>, dynamic: Option<DynamicName>) -> StatsBinding {
        StatsBinding { fixed, dynamic }
    }
}

fn push_entry(out: &mut String, e: &Entry, underscore: bool) {
    out.push_str(&e.key);
    if underscore || !e.value.is_empty() {
        out.push('_');
        out.push_str(&e.value);
    }
}

impl StatsBinding {
    /// The name this request counts under, when it is built from its values.
    pub fn dynamic_name(&self, entries: &[Entry]) -> Option<String> {
        let d = self.dynamic.as_ref()?;
        let mut out = d.domain.clone();
        for (segment, entry) in d.segments.iter().zip(entries) {
            out.push('.');
            match segment {
                Segment::Fixed(s) => out.push_str(s),
                Segment::Value { underscore } => push_entry(&mut out, entry, *underscore),
            }
        }
        Some(sanitize(&out).into_owned())
    }

    /// Calls `f` with the statistics this request counts into: a request-valued name while
    /// there is room for it, else the rule's own.
    pub fn with(&self, entries: &[Entry], stats: &Statistics, f: impl FnOnce(&RuleStats)) {
        match self.dynamic_name(entries).and_then(|n| stats.dynamic(&n)) {
            Some(d) => f(&d),
            None => f(&self.fixed),
        }
    }
}

/// envoyproxy/ratelimit's name for a limit override: the domain and every entry.
pub fn override_name(domain: &str, entries: &[Entry]) -> String {
    let mut out = domain.to_string();
    for e in entries {
        out.push('.');
        push_entry(&mut out, e, false);
    }
    sanitize(&out).into_owned()
}
