//! Reading a mapping file: its YAML shape, then each mapping checked as statsd_exporter checks
//! it, with `defaults:` applied. Errors carry the line of the YAML error or of the mapping.

use serde::Deserialize;
use serde_yaml::Value;

use super::glob::{order_globs, GlobPattern, GlobSource, Template};
use crate::telemetry::stats::mapper::kind::{
    StatKind, SummaryQuantile, TimerType, DEFAULT_BUCKETS, DEFAULT_QUANTILES,
};
use crate::telemetry::stats::mapper::model::{
    CompiledMapping, Mapper, MapperError, Matcher, Options,
};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapperFile {
    #[serde(default)]
    defaults: Option<MapperDefaults>,
    #[serde(default)]
    mappings: Option<Vec<MappingEntry>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapperDefaults {
    observer_type: Option<String>,
    timer_type: Option<String>,
    buckets: Option<Vec<f64>>,
    quantiles: Option<Vec<SummaryQuantile>>,
    match_type: Option<String>,
    glob_disable_ordering: Option<bool>,
    ttl: Option<Value>,
    summary_options: Option<SummaryOpts>,
    histogram_options: Option<HistogramOpts>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MappingEntry {
    #[serde(rename = "match")]
    pattern: Option<String>,
    name: Option<String>,
    labels: Option<serde_yaml::Mapping>,
    #[serde(rename = "honor_labels")]
    _honor_labels: Option<bool>,
    observer_type: Option<String>,
    timer_type: Option<String>,
    buckets: Option<Vec<f64>>,
    quantiles: Option<Vec<SummaryQuantile>>,
    match_type: Option<String>,
    help: Option<String>,
    action: Option<String>,
    match_metric_type: Option<String>,
    ttl: Option<Value>,
    summary_options: Option<SummaryOpts>,
    histogram_options: Option<HistogramOpts>,
    scale: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SummaryOpts {
    quantiles: Option<Vec<SummaryQuantile>>,
    max_age: Option<Value>,
    #[serde(rename = "age_buckets")]
    _age_buckets: Option<u32>,
    #[serde(rename = "buf_cap")]
    _buf_cap: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistogramOpts {
    buckets: Option<Vec<f64>>,
    #[serde(rename = "native_histogram_bucket_factor")]
    _native_histogram_bucket_factor: Option<f64>,
    #[serde(rename = "native_histogram_max_buckets")]
    _native_histogram_max_buckets: Option<u32>,
}

/// What is wrong with `defaults:` or one mapping.
#[derive(Debug, thiserror::Error)]
enum MappingFault {
    #[error("invalid {field} {value:?} (expected {expected})")]
    BadValue {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("invalid {field} {value:?} (expected a duration such as 30s or 5m)")]
    BadDuration { field: &'static str, value: String },
    #[error("invalid label key: {0:?} (a letter or _, then one or more letters, digits or _)")]
    LabelKey(String),
    #[error("label {0:?}: its value must be a string")]
    LabelValue(String),
    #[error("metric mapping didn't set a metric name")]
    NoName,
    #[error("metric name {0:?} is not a metric name (letters, digits, _ and $n/${{n}} references, not starting with a digit)")]
    BadName(String),
    #[error("invalid match: {0:?} (a glob is components separated by '.', each '*' or letters, digits, _ and -)")]
    BadGlob(String),
    #[error("invalid regex {pattern:?} in mapping: {error}")]
    BadRegex {
        pattern: String,
        error: Box<regex::Error>,
    },
    #[error("cannot use {0} in both the top level and {1} at the same time in {2:?}")]
    Both(&'static str, &'static str, String),
    #[error("cannot use {0} observer and {1} at the same time")]
    Conflict(&'static str, &'static str),
}

pub(super) fn parse(yaml: &str, file: &str) -> Result<Mapper, MapperError> {
    let error = |line: Option<usize>, message: String| MapperError {
        file: file.to_string(),
        line,
        message,
    };
    let parsed: Option<MapperFile> = serde_yaml::from_str(yaml).map_err(|e| {
        let line = e.location().map(|l| l.line());
        error(line, yaml_message(&e))
    })?;
    let parsed = parsed.unwrap_or_default();
    let lines = Lines::scan(yaml);
    let defaults = parsed.defaults.unwrap_or_default();
    let resolved = Resolved::from(&defaults).map_err(|f| error(lines.defaults, f.to_string()))?;
    let entries = parsed.mappings.unwrap_or_default();
    let mut mappings = Vec::with_capacity(entries.len());
    let mut globs = Vec::new();
    let mut regexes = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let (mapping, glob_source) = compile(entry, index, &resolved)
            .map_err(|f| error(lines.mapping(index, entries.len()), f.to_string()))?;
        match glob_source {
            Some(source) => globs.push(source),
            None => regexes.push(index),
        }
        mappings.push(mapping);
    }
    Ok(Mapper {
        mappings,
        globs: order_globs(&globs),
        regexes,
        glob_disable_ordering: resolved.glob_disable_ordering,
        unmatched: resolved.options(None),
    })
}

/// serde_yaml's message without its " at line L column C" (the error carries the line).
fn yaml_message(e: &serde_yaml::Error) -> String {
    let text = e.to_string();
    let Some(at) = e.location() else {
        return text;
    };
    let suffix = format!(" at line {} column {}", at.line(), at.column());
    text.strip_suffix(&suffix)
        .map(str::to_string)
        .unwrap_or(text)
}

/// `defaults:` checked, with statsd_exporter's own defaults filled in.
struct Resolved {
    timer_type: TimerType,
    /// Whether `timer_type`/`observer_type` was given (only an explicit summary conflicts
    /// with histogram options).
    explicit_timer_type: bool,
    buckets: Vec<f64>,
    quantiles: Vec<SummaryQuantile>,
    regex: bool,
    glob_disable_ordering: bool,
}

impl Resolved {
    fn from(d: &MapperDefaults) -> Result<Resolved, MappingFault> {
        let timer_type = timer_type(d.observer_type.as_deref(), d.timer_type.as_deref())?;
        let regex = match_type(d.match_type.as_deref())?.unwrap_or(false);
        check_duration("ttl", d.ttl.as_ref())?;
        if let Some(s) = &d.summary_options {
            check_duration("max_age", s.max_age.as_ref())?;
        }
        let options_buckets = d.histogram_options.as_ref().and_then(|h| h.buckets.clone());
        let options_quantiles = d.summary_options.as_ref().and_then(|s| s.quantiles.clone());
        Ok(Resolved {
            timer_type: timer_type.unwrap_or_default(),
            explicit_timer_type: timer_type.is_some(),
            buckets: non_empty(options_buckets)
                .or_else(|| non_empty(d.buckets.clone()))
                .unwrap_or_else(|| DEFAULT_BUCKETS.to_vec()),
            quantiles: non_empty(options_quantiles)
                .or_else(|| non_empty(d.quantiles.clone()))
                .unwrap_or_else(|| DEFAULT_QUANTILES.to_vec()),
            regex,
            glob_disable_ordering: d.glob_disable_ordering.unwrap_or(false),
        })
    }

    /// A mapping's options: its timer type, buckets and quantiles where it has them, these
    /// defaults where it does not.
    fn options(&self, m: Option<&MappingEntry>) -> Options {
        let own_timer = m.and_then(|m| {
            timer_type(m.observer_type.as_deref(), m.timer_type.as_deref())
                .ok()
                .flatten()
        });
        let own_buckets = m.and_then(|m| {
            non_empty(m.buckets.clone())
                .or_else(|| non_empty(m.histogram_options.as_ref()?.buckets.clone()))
        });
        let own_quantiles = m.and_then(|m| {
            non_empty(m.quantiles.clone())
                .or_else(|| non_empty(m.summary_options.as_ref()?.quantiles.clone()))
        });
        Options {
            timer_type: own_timer.unwrap_or(self.timer_type),
            buckets: own_buckets.unwrap_or_else(|| self.buckets.clone()),
            quantiles: own_quantiles.unwrap_or_else(|| self.quantiles.clone()),
        }
    }
}

fn non_empty<T>(v: Option<Vec<T>>) -> Option<Vec<T>> {
    v.filter(|v| !v.is_empty())
}

/// One mapping, checked in statsd_exporter's order; a glob mapping also gives its glob.
fn compile(
    m: &MappingEntry,
    index: usize,
    defaults: &Resolved,
) -> Result<(CompiledMapping, Option<GlobSource>), MappingFault> {
    // The values statsd_exporter checks while decoding the YAML.
    let regex = match_type(m.match_type.as_deref())?.unwrap_or(defaults.regex);
    let drop = match m.action.as_deref().unwrap_or("") {
        "drop" => true,
        "map" | "" => false,
        other => return Err(bad("action", other, "map or drop")),
    };
    let kind = match m.match_metric_type.as_deref() {
        None => None,
        Some("counter") => Some(StatKind::Counter),
        Some("gauge") => Some(StatKind::Gauge),
        Some("observer" | "timer") => Some(StatKind::Timer),
        Some(other) => {
            return Err(bad(
                "match_metric_type",
                other,
                "counter, gauge or observer",
            ))
        }
    };
    let explicit_timer = timer_type(m.observer_type.as_deref(), m.timer_type.as_deref())?;
    check_duration("ttl", m.ttl.as_ref())?;
    if let Some(s) = &m.summary_options {
        check_duration("max_age", s.max_age.as_ref())?;
    }
    let labels = labels(m.labels.as_ref())?;
    let name = m.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return Err(MappingFault::NoName);
    }
    if !is_name_template(name) {
        return Err(MappingFault::BadName(name.to_string()));
    }
    let pattern = m.pattern.as_deref().unwrap_or("");
    let (matcher, stars, glob) = if regex {
        let compiled = regex::Regex::new(pattern).map_err(|error| MappingFault::BadRegex {
            pattern: pattern.to_string(),
            error: Box::new(error),
        })?;
        let matcher = Matcher::Regex {
            regex: compiled,
            kind,
        };
        (matcher, None, None)
    } else {
        let glob =
            GlobPattern::parse(pattern).ok_or_else(|| MappingFault::BadGlob(pattern.into()))?;
        let stars = glob.stars();
        let source = GlobSource {
            mapping: index,
            pattern: glob,
            kind,
        };
        (Matcher::Glob, Some(stars), Some(source))
    };
    let template = |text: &str| match stars {
        Some(stars) => Template::glob(text, stars),
        None => Template::Regex(text.to_string()),
    };
    if m.summary_options
        .as_ref()
        .is_some_and(|s| s.quantiles.is_some())
        && m.quantiles.is_some()
    {
        return Err(MappingFault::Both(
            "quantiles",
            "summary options",
            pattern.into(),
        ));
    }
    if m.histogram_options
        .as_ref()
        .is_some_and(|h| h.buckets.is_some())
        && m.buckets.is_some()
    {
        return Err(MappingFault::Both(
            "buckets",
            "histogram options",
            pattern.into(),
        ));
    }
    let effective = explicit_timer.or(defaults.explicit_timer_type.then_some(defaults.timer_type));
    match effective {
        Some(TimerType::Histogram) if m.summary_options.is_some() => {
            return Err(MappingFault::Conflict("histogram", "summary options"))
        }
        Some(TimerType::Summary) if m.histogram_options.is_some() => {
            return Err(MappingFault::Conflict("summary", "histogram options"))
        }
        _ => {}
    }
    let mapping = CompiledMapping {
        matcher,
        drop,
        name: template(name),
        labels: labels
            .into_iter()
            .map(|(k, v)| {
                let t = template(&v);
                (k, t)
            })
            .collect(),
        options: defaults.options(Some(m)),
        help: m.help.clone().filter(|h| !h.is_empty()),
        scale: m.scale,
    };
    Ok((mapping, glob))
}

fn bad(field: &'static str, value: &str, expected: &'static str) -> MappingFault {
    MappingFault::BadValue {
        field,
        value: value.to_string(),
        expected,
    }
}

/// `observer_type`, else its old name `timer_type`; `None` when neither is given.
fn timer_type(
    observer: Option<&str>,
    timer: Option<&str>,
) -> Result<Option<TimerType>, MappingFault> {
    let (field, value) = match (observer, timer) {
        (Some(v), _) => ("observer_type", v),
        (None, Some(v)) => ("timer_type", v),
        (None, None) => return Ok(None),
    };
    match value {
        "histogram" => Ok(Some(TimerType::Histogram)),
        "summary" | "" => Ok(Some(TimerType::Summary)),
        other => Err(bad(field, other, "summary or histogram")),
    }
}

/// `match_type`: `Some(true)` for regex, `Some(false)` for glob, `None` when not given.
fn match_type(value: Option<&str>) -> Result<Option<bool>, MappingFault> {
    match value {
        None => Ok(None),
        Some("regex") => Ok(Some(true)),
        Some("glob" | "") => Ok(Some(false)),
        Some(other) => Err(bad("match_type", other, "glob or regex")),
    }
}

/// Labels in the file's order, names checked, scalar values as text (Go reads `200` as "200").
fn labels(map: Option<&serde_yaml::Mapping>) -> Result<Vec<(String, String)>, MappingFault> {
    let Some(map) = map else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|(key, value)| {
            let key = match key {
                Value::String(k) => k.clone(),
                other => scalar_text(other).unwrap_or_default(),
            };
            let mut chars = key.chars();
            let first = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            let rest: Vec<char> = chars.collect();
            if !first
                || rest.is_empty()
                || !rest.iter().all(|c| c.is_ascii_alphanumeric() || *c == '_')
            {
                return Err(MappingFault::LabelKey(key));
            }
            let value = scalar_text(value).ok_or_else(|| MappingFault::LabelValue(key.clone()))?;
            Ok((key, value))
        })
        .collect()
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

/// statsd_exporter's check of a mapping's `name`: ASCII letters, digits, `_`, and `$n` or
/// `${n}` references; not starting with a digit.
fn is_name_template(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'$' {
            let mut j = i + 1;
            if bytes.get(j) == Some(&b'{') {
                j += 1;
            }
            let digits = bytes[j..].iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == 0 {
                return false;
            }
            j += digits;
            if bytes.get(j) == Some(&b'}') {
                j += 1;
            }
            i = j;
        } else if c.is_ascii_alphabetic() || c == b'_' || (i > 0 && c.is_ascii_digit()) {
            i += 1;
        } else {
            return false;
        }
    }
    !bytes.is_empty()
}

/// A Go duration as yaml.v2 reads one: an integer (nanoseconds) or text like `1h30m`, `0.5s`.
fn check_duration(field: &'static str, value: Option<&Value>) -> Result<(), MappingFault> {
    let ok = match value {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.is_i64() || n.is_u64(),
        Some(Value::String(s)) => is_go_duration(s),
        Some(_) => false,
    };
    if ok {
        return Ok(());
    }
    let text = value
        .and_then(scalar_text)
        .unwrap_or_else(|| format!("{value:?}"));
    Err(MappingFault::BadDuration { field, value: text })
}

fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let number = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let digits = &rest[..number];
        if digits.is_empty() || digits == "." || digits.matches('.').count() > 1 {
            return false;
        }
        rest = &rest[number..];
        let unit = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        let Some(unit) = unit else { return false };
        rest = &rest[unit.len()..];
    }
    true
}

/// Where `defaults:` and each mapping of the block list `mappings:` start (lines from 1), found
/// by reading the text: the YAML parser does not say where a value it read was.
struct Lines {
    defaults: Option<usize>,
    mappings: Option<usize>,
    items: Vec<usize>,
}

impl Lines {
    fn scan(yaml: &str) -> Lines {
        let mut lines = Lines {
            defaults: None,
            mappings: None,
            items: Vec::new(),
        };
        let top_key = |line: &str, key: &str| {
            line.strip_prefix(key)
                .and_then(|r| r.strip_prefix(':'))
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        };
        let mut item_indent: Option<usize> = None;
        let mut in_mappings = false;
        for (n, line) in yaml.lines().enumerate() {
            let number = n + 1;
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = line.len() - trimmed.len();
            let dash = trimmed == "-" || trimmed.starts_with("- ");
            if in_mappings {
                match item_indent {
                    None if dash => {
                        item_indent = Some(indent);
                        lines.items.push(number);
                        continue;
                    }
                    Some(at) if indent == at && dash => {
                        lines.items.push(number);
                        continue;
                    }
                    Some(at) if indent > at => continue,
                    _ => in_mappings = false,
                }
            }
            if top_key(line, "defaults") && lines.defaults.is_none() {
                lines.defaults = Some(number);
            } else if top_key(line, "mappings") && lines.mappings.is_none() {
                lines.mappings = Some(number);
                in_mappings = true;
            }
        }
        lines
    }

    /// The line of mapping `index` of `count`: its `- ` line when the scan found every
    /// mapping, else the line of `mappings:`.
    fn mapping(&self, index: usize, count: usize) -> Option<usize> {
        if self.items.len() == count {
            self.items.get(index).copied()
        } else {
            self.mappings
        }
    }
}
