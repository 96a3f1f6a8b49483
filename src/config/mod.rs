//! Compiled configuration: an immutable match tree per domain, built from YAML files.
//!
//! `load` reads files and directories, `raw` is the YAML shape, `compile` validates it and
//! builds the tree. A `Config` is never mutated: a reload builds a new one and swaps it in,
//! so a bad file never replaces a good config.

mod compile;
mod load;
mod raw;
mod reload;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

pub use compile::compile_file;
pub use load::{compile_sources, load_path, read_sources, ConfigError, LoadOptions};
pub use reload::{ReloadStatus, Reloader};

use crate::limit::Limit;

/// All domains.
#[derive(Debug, Default)]
pub struct Config {
    pub domains: HashMap<String, Domain>,
}

#[derive(Debug)]
pub struct Domain {
    pub name: String,
    pub root: Level,
}

/// The rules of one level of the tree, indexed for lookup without allocating.
#[derive(Debug, Default)]
pub struct Level {
    keys: HashMap<String, KeyRules>,
}

#[derive(Debug, Default)]
struct KeyRules {
    exact: HashMap<String, Rule>,
    /// `value: prefix*` rules, in config order: the first match wins.
    wildcards: Vec<Rule>,
    /// The rule without a value: matches any value.
    any: Option<Rule>,
}

/// How a rule's `value` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Exact(String),
    /// `value: "abc*"`: any value starting with the prefix.
    Prefix(String),
    /// No value: any value.
    Any,
}

impl Pattern {
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Pattern::Exact(v) => v == value,
            Pattern::Prefix(p) => value.starts_with(p.as_str()),
            Pattern::Any => true,
        }
    }
}

/// One descriptor rule of the config.
#[derive(Debug)]
pub struct Rule {
    pub key: String,
    pub pattern: Pattern,
    /// Limits enforced when this rule is matched (and, if `hierarchical`, when passed through).
    pub limits: Vec<Arc<Limit>>,
    pub unlimited: bool,
    /// Names listed by an `unlimited` limit's `replaces`.
    pub unlimited_replaces: Vec<String>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub hierarchical: bool,
    /// At this level, counter keys use the pattern instead of the request's value.
    pub share_threshold: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    /// Per-descriptor metadata for the response's dynamic metadata.
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// `domain.key_value.key2` as envoyproxy/ratelimit names it (stats, `/rlconfig`).
    pub full_key: String,
    pub children: Level,
}

impl Level {
    /// envoyproxy/ratelimit's precedence: exact key+value, then the first matching
    /// wildcard in config order, then the key-only rule.
    pub fn lookup(&self, key: &str, value: &str) -> Option<&Rule> {
        let rules = self.keys.get(key)?;
        rules
            .exact
            .get(value)
            .or_else(|| rules.wildcards.iter().find(|r| r.pattern.matches(value)))
            .or(rules.any.as_ref())
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Every rule of this level, in a stable order.
    pub fn rules(&self) -> Vec<&Rule> {
        let mut keys: Vec<&String> = self.keys.keys().collect();
        keys.sort();
        let mut out = Vec::new();
        for k in keys {
            let r = &self.keys[k];
            let mut exact: Vec<&Rule> = r.exact.values().collect();
            exact.sort_by(|a, b| a.full_key.cmp(&b.full_key));
            out.extend(exact);
            out.extend(r.wildcards.iter());
            out.extend(r.any.iter());
        }
        out
    }

    /// Adds a rule; on a duplicate returns its composite key.
    fn insert(&mut self, rule: Rule) -> Result<(), String> {
        let rules = self.keys.entry(rule.key.clone()).or_default();
        let taken = match &rule.pattern {
            Pattern::Exact(v) => rules.exact.contains_key(v),
            Pattern::Prefix(_) => rules.wildcards.iter().any(|r| r.pattern == rule.pattern),
            Pattern::Any => rules.any.is_some(),
        };
        if taken {
            return Err(rule.full_key);
        }
        match &rule.pattern {
            Pattern::Exact(v) => {
                rules.exact.insert(v.clone(), rule);
            }
            Pattern::Prefix(_) => rules.wildcards.push(rule),
            Pattern::Any => rules.any = Some(rule),
        }
        Ok(())
    }
}

impl Config {
    /// The compiled limits, one per line, sorted: what `/rlconfig` and `check-config` print.
    /// Starts like envoyproxy/ratelimit's lines; tollgate's extensions follow when set.
    pub fn describe(&self) -> String {
        let mut lines = Vec::new();
        let mut names: Vec<&String> = self.domains.keys().collect();
        names.sort();
        for name in names {
            describe_level(&self.domains[name].root, &mut lines);
        }
        let mut out = String::new();
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
        out
    }
}

fn describe_level(level: &Level, lines: &mut Vec<String>) {
    for rule in level.rules() {
        if rule.unlimited {
            lines.push(format!("{}: unlimited", rule.full_key));
        }
        for l in &rule.limits {
            let mut s = format!(
                "{}: unit={} requests_per_unit={}, shadow_mode: {}",
                rule.full_key,
                l.unit.name().to_ascii_uppercase(),
                l.requests_per_unit,
                rule.shadow_mode
            );
            if !l.name.is_empty() {
                let _ = write!(s, ", name: {}", l.name);
            }
            let p = &l.params;
            if p.algorithm != crate::limit::Algorithm::FixedWindow
                || p.window_us != l.unit.seconds() * 1_000_000
            {
                let _ = write!(
                    s,
                    ", algorithm: {}, window: {}ms",
                    p.algorithm.name(),
                    p.window_us / 1000
                );
            }
            if p.algorithm == crate::limit::Algorithm::TokenBucket {
                let _ = write!(s, ", burst: {}", p.burst);
            }
            for (flag, on) in [
                ("shared", l.shared),
                ("overdraft", p.overdraft),
                ("hierarchical", rule.hierarchical),
                ("quota_mode", rule.quota_mode),
            ] {
                if on {
                    let _ = write!(s, ", {flag}: true");
                }
            }
            lines.push(s);
        }
        describe_level(&rule.children, lines);
    }
}
