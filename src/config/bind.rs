//! Binds a compiled domain's rules to the statistics they count into (envoyproxy/ratelimit's
//! names, [`crate::telemetry::stats::name`]): once per config, when it is compiled with
//! statistics on, so a decision looks up no name for a rule whose name is fixed. A rule with
//! an unchanged key finds its counters of the previous config.

use std::sync::Arc;

use crate::config::{Domain, Level, Pattern};
use crate::telemetry::stats::name::{DynamicName, Segment, StatsBinding};
use crate::telemetry::stats::registry::{sanitize, Statistics};

/// One level on the way to a rule, as its name needs it.
struct Step {
    fixed: String,
    /// `value_to_metric` on a level matched without an exact value.
    value_to_metric: bool,
    share_threshold: bool,
}

/// Gives every rule of `domain` that has limits its statistics from `stats` (where a rule with
/// an unchanged key finds its counters of the previous config).
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
            rule.stats = Some(Arc::new(StatsBinding::new(
                stats.rule(&sanitize(&rule.full_key)),
                dynamic_name(domain, path, rule.detailed_metric),
            )));
        }
        let full_key = rule.full_key.clone();
        bind_level(&mut rule.children, domain, &full_key, path, stats);
        path.pop();
    }
}

fn dynamic_name(domain: &str, path: &[Step], detailed: bool) -> Option<DynamicName> {
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
    Some(DynamicName {
        domain: domain.to_string(),
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::{compile_sources, LoadOptions};
    use crate::pb::common::rate_limit_descriptor::Entry;
    use crate::telemetry::stats::name::override_name;
    use crate::telemetry::stats::registry::{Observation, MAX_DYNAMIC};

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

    fn binding(stats: &Arc<Statistics>, path: &[(&str, &str)]) -> Arc<StatsBinding> {
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
        rule.unwrap().stats.clone().unwrap()
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
        for i in 0..MAX_DYNAMIC + 5 {
            let e = entries(&[("route", "r1"), ("user", &i.to_string())]);
            detailed.with(&e, &stats, |s| {
                s.observe(
                    Observation {
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
        assert_eq!(names, MAX_DYNAMIC + 1);
        // The overflow counted under the rule's own key.
        assert_eq!(detailed.fixed.values()[0], 5);
    }
}
