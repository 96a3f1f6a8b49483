//! Which statistics a compiled limit counts into: envoyproxy/ratelimit's key for a rule is
//! the domain, then each level's `key` or `key_value` as written in the config, joined by
//! `.` (the rule's `full_key`). Bound once per config ([`bind`]), so a decision builds no
//! name, except for rules whose name takes the request's values:
//!
//! - `detailed_metric: true`: every level as the request's `key_value` (a level with
//!   `share_threshold` keeps its pattern);
//! - `value_to_metric: true` on a level matched without an exact value: the request's value
//!   at that level;
//! - a limit override in the request: the descriptor's `key_value` entries.
//!
//! Names are sanitized as envoyproxy/ratelimit does: `:` and `|` become `_`, and so do the
//! dots of anything shaped like an IPv4 address.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use super::registry::{RuleStats, Statistics};
use crate::config::{Domain, Level, Pattern};
use crate::pb::common::rate_limit_descriptor::Entry;

/// A rule's statistics, shared by its limits.
#[derive(Debug)]
pub struct LimitStats {
    /// Under the rule's own key.
    pub fixed: Arc<RuleStats>,
    /// Set when the name takes request values.
    dynamic: Option<DynamicKey>,
}

impl PartialEq for LimitStats {
    fn eq(&self, other: &LimitStats) -> bool {
        Arc::ptr_eq(&self.fixed, &other.fixed) && self.dynamic == other.dynamic
    }
}

#[derive(Debug, Clone, PartialEq)]
struct DynamicKey {
    domain: String,
    segments: Vec<Segment>,
}

/// One level of a name built per request.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    /// As the config writes it (`key`, `key_value`, `key_prefix*`).
    Fixed(String),
    /// The request's entry at this level: `key_value`, or `key` when the value is empty
    /// (`key_` with `underscore`, as `detailed_metric` writes it).
    Value { underscore: bool },
}

/// envoyproxy/ratelimit's `SanitizeStatName`.
pub fn sanitize(name: &str) -> Cow<'_, str> {
    static IPV4: OnceLock<regex::Regex> = OnceLock::new();
    let ipv4 = IPV4.get_or_init(|| {
        regex::Regex::new(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
            .expect("a valid pattern")
    });
    if !name.contains([':', '|']) && !ipv4.is_match(name) {
        return Cow::Borrowed(name);
    }
    let replaced = name.replace([':', '|'], "_");
    Cow::Owned(
        ipv4.replace_all(&replaced, |c: &regex::Captures<'_>| c[0].replace('.', "_"))
            .into_owned(),
    )
}

/// One level on the way to a rule, as its name needs it.
struct Step {
    fixed: String,
    /// `value_to_metric` on a level matched without an exact value.
    value_to_metric: bool,
    share_threshold: bool,
}

/// Gives every limit of `domain` its rule's statistics from `stats` (where a rule with an
/// unchanged key finds its counters of the previous config).
pub fn bind(domain: &mut Domain, stats: &Statistics) {
    let name = domain.name.clone();
    bind_level(&mut domain.root, &name, &name, &mut Vec::new(), stats);
}

fn bind_level(
    level: &mut Level,
    domain: &str,
    parent: &str,
    path: &mut Vec<Step>,
    stats: &Statistics,
) {
    for rule in level.rules_mut() {
        let fixed = rule
            .full_key
            .strip_prefix(parent)
            .and_then(|s| s.strip_prefix('.'))
            .unwrap_or(&rule.key)
            .to_string();
        path.push(Step {
            fixed,
            value_to_metric: rule.value_to_metric && !matches!(rule.pattern, Pattern::Exact(_)),
            share_threshold: rule.share_threshold,
        });
        if !rule.limits.is_empty() {
            let binding = Arc::new(LimitStats {
                fixed: stats.rule(&sanitize(&rule.full_key)),
                dynamic: dynamic_key(domain, path, rule.detailed_metric),
            });
            for limit in &mut rule.limits {
                Arc::make_mut(limit).stats = Some(binding.clone());
            }
        }
        let full_key = rule.full_key.clone();
        bind_level(&mut rule.children, domain, &full_key, path, stats);
        path.pop();
    }
}

fn dynamic_key(domain: &str, path: &[Step], detailed: bool) -> Option<DynamicKey> {
    let segments: Vec<Segment> = if detailed {
        let shared = path.iter().any(|s| s.share_threshold);
        path.iter()
            .map(|s| match s.share_threshold {
                true => Segment::Fixed(s.fixed.clone()),
                false => Segment::Value {
                    underscore: !shared,
                },
            })
            .collect()
    } else if path.iter().any(|s| s.value_to_metric && !s.share_threshold) {
        path.iter()
            .map(|s| match s.value_to_metric && !s.share_threshold {
                true => Segment::Value { underscore: false },
                false => Segment::Fixed(s.fixed.clone()),
            })
            .collect()
    } else {
        return None;
    };
    Some(DynamicKey {
        domain: domain.to_string(),
        segments,
    })
}

fn push_entry(out: &mut String, e: &Entry, underscore: bool) {
    out.push_str(&e.key);
    if underscore || !e.value.is_empty() {
        out.push('_');
        out.push_str(&e.value);
    }
}

impl LimitStats {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::{compile_sources, LoadOptions};

    const YAML: &str = "domain: d
descriptors:
  - key: route
    value: r1
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: api*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: minute, requests_per_unit: 5}
";

    fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect()
    }

    fn binding(stats: &Arc<Statistics>, path: &[(&str, &str)]) -> Arc<LimitStats> {
        let opts = LoadOptions {
            stats: Some(stats.clone()),
            ..LoadOptions::default()
        };
        let config = compile_sources(&[("t.yaml".into(), YAML.into())], &opts).unwrap();
        let mut level = &config.domains["d"].root;
        let mut rule = None;
        for (k, v) in path {
            let r = level.lookup(k, v).unwrap();
            level = &r.children;
            rule = Some(r);
        }
        rule.unwrap().limits[0].stats.clone().unwrap()
    }

    #[test]
    fn names_as_envoyproxy_ratelimit_builds_them() {
        let stats = Arc::new(Statistics::new(None, 0.8));
        let plain = binding(&stats, &[("route", "r1")]);
        assert_eq!(plain.dynamic_name(&entries(&[("route", "r1")])), None);
        let detailed = binding(&stats, &[("route", "r1"), ("user", "bob")]);
        assert_eq!(
            detailed.dynamic_name(&entries(&[("route", "r1"), ("user", "bob")])),
            Some("d.route_r1.user_bob".into())
        );
        assert_eq!(
            detailed.dynamic_name(&entries(&[("route", "r1"), ("user", "")])),
            Some("d.route_r1.user_".into())
        );
        let wildcard = binding(&stats, &[("path", "api1")]);
        assert_eq!(
            wildcard.dynamic_name(&entries(&[("path", "api1")])),
            Some("d.path_api1".into())
        );
        let nested = binding(&stats, &[("ip", "10.0.0.1"), ("method", "GET")]);
        assert_eq!(
            nested.dynamic_name(&entries(&[("ip", "10.0.0.1"), ("method", "GET")])),
            Some("d.ip_10_0_0_1.method_GET".into())
        );
        // A reload finds the same counters.
        let again = binding(&stats, &[("route", "r1")]);
        assert!(Arc::ptr_eq(&plain.fixed, &again.fixed));
        assert_eq!(
            override_name("d", &entries(&[("a", "x:y|z"), ("b", "")])),
            "d.a_x_y_z.b"
        );
    }

    #[test]
    fn request_valued_names_are_capped() {
        let stats = Arc::new(Statistics::new(None, 0.8));
        let detailed = binding(&stats, &[("route", "r1"), ("user", "u")]);
        for i in 0..super::super::registry::MAX_DYNAMIC + 5 {
            let e = entries(&[("route", "r1"), ("user", &i.to_string())]);
            detailed.with(&e, &stats, |s| {
                s.observe(
                    crate::telemetry::stats::registry::Observation {
                        hits: 1,
                        limit: 5,
                        before: 0,
                        after: 1,
                        over: false,
                        shadow: false,
                    },
                    0.8,
                )
            });
        }
        let mut names = 0;
        stats.visit(&mut |v| {
            if v.name.ends_with(".total_hits") && v.value > 0 {
                names += 1;
            }
        });
        // Every capped name, and the rule's own.
        assert_eq!(names, super::super::registry::MAX_DYNAMIC + 1);
        // The overflow counted under the rule's own key.
        assert_eq!(detailed.fixed.values()[0], 5);
    }
}
