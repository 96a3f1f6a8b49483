//! statsd_exporter's mapping file, as envoyproxy/ratelimit's Prometheus sink uses it: turns a
//! statsd statistic name (`ratelimit.service.rate_limit.mydomain.tenant.over_limit`) and its
//! kind into a Prometheus series name and labels, or drops it.
//!
//! The semantics follow prometheus/statsd_exporter v0.26.1 (the version envoyproxy/ratelimit
//! builds with), its `pkg/mapper` and the exporter's use of it:
//!
//! - `match` is a glob by default (`match_type: regex`, or `defaults: match_type: regex`, makes
//!   it a regex). A glob is split at `.`; each of its components is either text, equal to the
//!   name's component, or `*`, which matches one whole component, whatever its characters (`/`,
//!   `-`, `:`, empty ...), never a `.`. A glob and a name match only with as many components.
//!   `*` inside a component (`foo*`) is refused, as statsd_exporter refuses it.
//! - Globs come first: a name that any glob matches takes the first such glob in file order,
//!   even when a regex mapping earlier in the file also matches. With
//!   `defaults: glob_disable_ordering: true` the most literal glob wins instead (text before
//!   `*`, component by component from the left). Two quirks of statsd_exporter's glob state
//!   machine are kept: a glob that repeats an earlier glob's text (for the same kind) keeps the
//!   earlier mapping but takes the later one's place in the order, and a glob that is a prefix
//!   of an earlier, longer glob (`a.b` after `a.b.c`) never matches.
//! - Regexes are tried next, in file order. A regex is searched for, not anchored (Go's
//!   `FindStringSubmatchIndex`, leftmost-first as the `regex` crate is); `^`/`$` anchor it.
//!   `match_metric_type` of a regex mapping is checked after the regex matched, and a mapping
//!   of another kind lets the next one try.
//! - `$1`, `${1}` in `name` and label values take the n-th `*` (glob) or group (regex; Go's
//!   template rules, which the `regex` crate's `expand` shares: `$name` is the longest run of
//!   letters, digits and `_`, so `$1_x` is group `1_x`, unknown groups are empty, `$$` is `$`).
//!   In a glob's template the reference is `$` then an optional `{`, the longest run of
//!   letters, digits, `_` and `$`, then an optional `}`; a run that is not a number from 1 to
//!   the count of `*`s is empty (so `$1$2` is empty; write `${1}${2}`).
//! - `action: drop` drops the statistic; a mapped name that comes out empty drops it too
//!   (statsd_exporter counts it as `empty_metric_name` and drops it).
//! - The mapped name, and the name of a statistic no mapping matched, are escaped as
//!   statsd_exporter escapes them ([`escape_metric_name`]), so a mapped name is always a valid
//!   Prometheus name. Label names are checked when the file is read (statsd_exporter's rule:
//!   a letter or `_`, then one or more letters, digits or `_`, so one-letter names are refused).
//! - `timer_type`/`observer_type` (`observer_type` wins), `buckets`/`histogram_options`,
//!   `quantiles`/`summary_options`, `help` and `scale` are read and exposed in [`Mapped`],
//!   resolved against `defaults:` (histogram buckets default to Prometheus's default buckets,
//!   summary quantiles to 0.5, 0.9 and 0.99). `ttl`, `honor_labels`, `max_age`, `age_buckets`,
//!   `buf_cap` and the native histogram settings are checked and ignored.
//! - Unlike statsd_exporter v0.26.1 (whose YAML reading ignores unknown keys; later versions
//!   refuse them), an unknown key is an error, with its line.
//!
//! Regex classes differ slightly: Go's `\d`, `\w`, `\s` are ASCII, the `regex` crate's are
//! Unicode.

mod glob;
pub mod kind;
pub mod model;
mod parse;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use glob::Template;
use kind::StatKind;
use model::{Mapped, Mapper, MapperError, Mapping, Matcher};

impl Mapper {
    /// Reads a mapping file's text; `file` names it in errors.
    pub fn parse(yaml: &str, file: &str) -> Result<Mapper, MapperError> {
        parse::parse(yaml, file)
    }

    /// envoyproxy/ratelimit's built-in mapping (its `src/telemetry/stats/prom/default_mapper.yaml`),
    /// used when it runs with the Prometheus sink and no mapping file.
    pub fn envoyproxy_default() -> &'static Mapper {
        static DEFAULT: OnceLock<Mapper> = OnceLock::new();
        DEFAULT.get_or_init(|| {
            Mapper::parse(
                include_str!("envoyproxy_default_mapper.yaml"),
                "envoyproxy_default_mapper.yaml",
            )
            .expect("the embedded envoyproxy/ratelimit mapping parses")
        })
    }

    /// The Prometheus series of the statistic `statsd_name` of kind `kind`.
    pub fn map(&self, statsd_name: &str, kind: StatKind) -> Mapping {
        let Some((index, captures)) = self.find(statsd_name, kind) else {
            return self.unmatched(statsd_name);
        };
        let mapping = &self.mappings[index];
        if mapping.drop {
            return Mapping::Drop;
        }
        let expand = |template: &Template| match &captures {
            Found::Glob(fields) => template.expand_glob(fields),
            Found::Regex(caps) => template.expand_regex(caps),
        };
        let name = escape_metric_name(&expand(&mapping.name));
        if name.is_empty() {
            return Mapping::Drop;
        }
        let labels = mapping
            .labels
            .iter()
            .map(|(key, value)| (key.clone(), expand(value)))
            .collect();
        Mapping::Metric(Mapped {
            name,
            labels,
            help: mapping.help.clone(),
            scale: mapping.scale,
            matched: true,
            ..mapping.options.exposed()
        })
    }

    /// The mapping that takes `name`, and what its `*`s or groups captured.
    fn find<'n>(&self, name: &'n str, kind: StatKind) -> Option<(usize, Found<'n>)> {
        let candidates = &self.globs[kind.index()];
        if !candidates.is_empty() {
            let fields: Vec<&str> = name.split('.').collect();
            let found = if self.glob_disable_ordering {
                glob::most_literal(candidates.iter().map(|c| &c.pattern), &fields)
            } else {
                candidates.iter().position(|c| c.pattern.matches(&fields))
            };
            if let Some(i) = found {
                let captures = candidates[i].pattern.captures(&fields);
                return Some((candidates[i].mapping, Found::Glob(captures)));
            }
        }
        self.regexes.iter().find_map(|&index| {
            let Matcher::Regex { regex, kind: only } = &self.mappings[index].matcher else {
                return None;
            };
            let caps = regex.captures(name)?;
            if only.is_some_and(|only| only != kind) {
                return None;
            }
            Some((index, Found::Regex(caps)))
        })
    }

    fn unmatched(&self, statsd_name: &str) -> Mapping {
        let name = escape_metric_name(statsd_name);
        if name.is_empty() {
            return Mapping::Drop;
        }
        Mapping::Metric(Mapped {
            name,
            matched: false,
            ..self.unmatched.exposed()
        })
    }
}

/// What a match captured.
enum Found<'n> {
    /// The name's components under the glob's `*`s, in order.
    Glob(Vec<&'n str>),
    Regex(regex::Captures<'n>),
}

/// statsd_exporter's escaping of a metric name: every character but ASCII letters, digits and
/// `_` becomes `_`, except that a `-` right after a `-` is left out (a run of dashes is one
/// `_`), and a name that starts with a digit gets a leading `_`. Empty stays empty.
pub fn escape_metric_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    let mut previous = None;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if c == '-' && previous == Some('-') {
            continue;
        } else {
            out.push('_');
        }
        previous = Some(c);
    }
    out
}
