//! Compiled configuration: an immutable match tree per domain, built from YAML files.
//!
//! `load` reads files and directories, `raw` is the YAML shape, `compile` validates it and
//! builds the tree. A `Config` is never mutated: a reload builds a new one and swaps it in,
//! so a bad file never replaces a good config.

pub mod bind;
pub mod compile;
pub mod error;
pub mod explain;
pub mod global;
pub mod load;
mod locate;
mod pool;
mod raw;
pub mod reload;
pub mod usage;
pub mod xds;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use error::DuplicateKey;

use crate::limit::Limit;
use crate::telemetry::stats::name::StatsBinding;

/// All domains.
#[derive(Debug, Default)]
pub struct Config {
    pub domains: HashMap<String, Domain>,
}

#[derive(Debug)]
pub struct Domain {
    pub name: String,
    pub root: Level,
    pub policy: DomainPolicy,
    /// `prices:`: what `spend:` limits charge a token at (`limit::money`).
    pub prices: Option<crate::limit::money::Prices>,
}

/// A domain's own settings (tollgate's top-level keys beside `domain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainPolicy {
    /// `disabled: true`: every request is answered OK without touching the store.
    pub disabled: bool,
    /// `allow_overrides: false`: limit overrides in requests are ignored.
    pub allow_overrides: bool,
    /// `max_hits: N`: the largest cost one descriptor may carry.
    pub max_hits: Option<u64>,
    /// A usage domain (`--usage-domains`): every limit, a caller's override too, is an
    /// overdraft limit.
    pub usage: bool,
    /// `reservations: {default_estimate: N}`: what a reservation that carries no estimate is
    /// charged (`None`: it is refused).
    pub default_estimate: Option<u64>,
}

impl Default for DomainPolicy {
    fn default() -> DomainPolicy {
        DomainPolicy {
            disabled: false,
            allow_overrides: true,
            max_hits: None,
            usage: false,
            default_estimate: None,
        }
    }
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
    /// A value with `*` in it (`abc*`, `bar*b`, `foo*bar*baz`): each `*` stands for any run of
    /// characters, empty included, as in envoyproxy/ratelimit. Held as the literal parts
    /// between the stars.
    Wildcard(Vec<String>),
    /// No value: any value.
    Any,
}

impl Pattern {
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Pattern::Exact(v) => v == value,
            Pattern::Wildcard(parts) => wildcard_matches(parts, value),
            Pattern::Any => true,
        }
    }
}

impl Pattern {
    /// The pattern of a rule's `value` (empty: any value).
    pub fn parse(value: &str) -> Pattern {
        if value.is_empty() {
            Pattern::Any
        } else if value.contains('*') {
            Pattern::Wildcard(value.split('*').map(str::to_string).collect())
        } else {
            Pattern::Exact(value.to_string())
        }
    }
}

/// Whether `value` is `parts` joined by runs of any characters: the first part is a prefix,
/// the last a suffix, the ones between appear in order. Taking each middle part at its first
/// occurrence leaves the most room for the rest, so the greedy scan is exact.
fn wildcard_matches(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return true;
    };
    if parts.len() == 1 {
        return value == first;
    }
    if value.len() < first.len() + last.len()
        || !value.starts_with(first.as_str())
        || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
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
    /// The envoyproxy/ratelimit statistics its limits count into ([`bind`]; `None` when the
    /// config is compiled without statistics).
    pub stats: Option<Arc<StatsBinding>>,
    pub children: Level,
}

impl Config {
    /// Every global limit (`global:`), in a stable order.
    pub fn global_limits(&self) -> Vec<Arc<Limit>> {
        let mut names: Vec<&String> = self.domains.keys().collect();
        names.sort();
        let mut out = Vec::new();
        for n in names {
            self.domains[n].root.each_limit(&mut |l| {
                if l.global.is_some() {
                    out.push(l.clone());
                }
            });
        }
        out
    }
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

    /// Calls `f` with every limit of this level and the levels below it.
    pub fn each_limit(&self, f: &mut dyn FnMut(&Arc<Limit>)) {
        for rule in self.rules() {
            rule.limits.iter().for_each(&mut *f);
            rule.children.each_limit(f);
        }
    }

    /// Calls `f` with every rule of this level and the levels below it.
    pub fn each_rule(&self, f: &mut dyn FnMut(&Rule)) {
        for rule in self.rules() {
            f(rule);
            rule.children.each_rule(f);
        }
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

    /// Every rule of this level, to change (in no particular order).
    pub(crate) fn rules_mut(&mut self) -> impl Iterator<Item = &mut Rule> {
        self.keys.values_mut().flat_map(|r| {
            r.exact
                .values_mut()
                .chain(r.wildcards.iter_mut())
                .chain(r.any.iter_mut())
        })
    }

    /// Adds a rule; a duplicate is refused with its composite key.
    fn insert(&mut self, rule: Rule) -> Result<(), DuplicateKey> {
        let rules = self.keys.entry(rule.key.clone()).or_default();
        let taken = match &rule.pattern {
            Pattern::Exact(v) => rules.exact.contains_key(v),
            Pattern::Wildcard(_) => rules.wildcards.iter().any(|r| r.pattern == rule.pattern),
            Pattern::Any => rules.any.is_some(),
        };
        if taken {
            return Err(DuplicateKey(rule.full_key));
        }
        match &rule.pattern {
            Pattern::Exact(v) => {
                rules.exact.insert(v.clone(), rule);
            }
            Pattern::Wildcard(_) => rules.wildcards.push(rule),
            Pattern::Any => rules.any = Some(rule),
        }
        Ok(())
    }
}

impl Config {
    /// A config without domains answers every request OK with no limit: say so loudly.
    pub fn warn_if_empty(&self, path: &std::path::Path) {
        if self.domains.is_empty() {
            tracing::warn!(
                path = %path.display(),
                "no domain found in the config: every request is answered OK without a limit"
            );
        }
    }

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
            if l.spend {
                let micros = crate::limit::money::format_micros(l.params.limit);
                let _ = write!(s, ", spend: {micros} (in micro-units: requests_per_unit)");
            }
            let p = &l.params;
            if let Some(c) = &p.calendar {
                let _ = write!(
                    s,
                    ", calendar: {}, timezone: {}",
                    c.period.name(),
                    c.zone.name
                );
                if c.period == crate::limit::calendar::Period::Week {
                    let _ = write!(s, ", week_starts: {}", c.week_starts_name());
                }
            } else if p.algorithm == crate::limit::Algorithm::Concurrency {
                let _ = write!(
                    s,
                    ", algorithm: concurrency, lease_ttl: {}s",
                    p.window_us / 1_000_000
                );
            } else if p.algorithm != crate::limit::Algorithm::FixedWindow
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
            if l.lease > 0 {
                let _ = write!(s, ", lease: {}", l.lease);
            }
            if p.max_wait_us > 0 {
                let _ = write!(s, ", max_wait: {}ms", p.max_wait_us / 1000);
            }
            if let Some(sh) = &l.shares {
                let _ = write!(s, ", shares: {{by: {}, classes: {{", sh.by);
                for (i, c) in sh.classes.iter().enumerate() {
                    let sep = if i > 0 { ", " } else { "" };
                    let _ = write!(
                        s,
                        "{sep}{}: {} ({} units)",
                        c.name, c.fraction, c.limit.params.limit
                    );
                }
                let _ = write!(
                    s,
                    "}}, default: {}, borrow_until: {}}}",
                    sh.classes[sh.default].name, sh.borrow_until
                );
            }
            if let Some(f) = &l.fair_share {
                let _ = write!(
                    s,
                    ", fair_share: {{by: {}, above: {} ({} units), floor: {}, max_tenants: {}}}",
                    f.by, f.above, f.tenant.params.borrow_until, f.floor, f.max_tenants
                );
            }
            if let Some(g) = &l.global {
                let _ = write!(
                    s,
                    ", global: {{home: {}, regions: [{}], on_partition: ",
                    g.home,
                    g.regions.join(", ")
                );
                let _ = match g.safe_share {
                    Some(f) => write!(s, "safe_share, safe_share: {f}}}"),
                    None => write!(s, "refuse}}"),
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::compile::compile_file;
    use crate::config::usage::UsageDomains;

    #[test]
    fn stars_stand_anywhere_for_any_run_of_characters() {
        let m = |pattern: &str, value: &str| Pattern::parse(pattern).matches(value);
        for (pattern, value, want) in [
            ("bar*b", "barab", true),
            ("bar*b", "bar123b", true),
            ("bar*b", "barb", true),
            ("bar*b", "bar", false),
            ("bar*b", "barbx", false),
            ("foo*bar*baz", "foobarbaz", true),
            ("foo*bar*baz", "foo-bar-baz", true),
            ("foo*bar*baz", "foobaz", false),
            ("foo*bar*baz", "foo-baz-bar", false),
            ("abc*", "abc", true),
            ("abc*", "abcdef", true),
            ("abc*", "ab", false),
            ("*", "", true),
            ("*x", "x", true),
            ("*x", "yx", true),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("**", "anything", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(m(pattern, value), want, "{pattern} vs {value}");
        }
    }

    #[test]
    fn several_documents_in_one_file_are_named_not_half_read() {
        let none = UsageDomains::default();
        let two = "domain: a\ndescriptors: []\n---\ndomain: b\n";
        let e = compile_file("f.yaml", two, &none).expect_err("two domains in one file");
        assert!(
            e.to_string()
                .contains("2 YAML documents (`---`) in one file"),
            "{e}"
        );
        // One document, with `---` before it: as any YAML file may be written.
        let one = "---\ndomain: a\n";
        assert_eq!(compile_file("f.yaml", one, &none).expect("one").name, "a");
    }
}
