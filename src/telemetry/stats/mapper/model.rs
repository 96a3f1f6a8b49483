//! What a mapping file compiles to: the [`Mapper`] and its mappings, what a lookup answers
//! ([`Mapping`], [`Mapped`]), and the error a file that cannot be used gets.

use super::glob::{GlobCandidate, Template};
use super::kind::{StatKind, SummaryQuantile, TimerType};

/// A mapping file, read and compiled once; [`Mapper::map`] is then a lookup.
#[derive(Debug)]
pub struct Mapper {
    pub(super) mappings: Vec<CompiledMapping>,
    /// For each [`StatKind`] (by [`StatKind::index`]), the globs that can match it, in the
    /// order they are tried (see [`glob::order_globs`]).
    pub(super) globs: [Vec<GlobCandidate>; 3],
    /// The regex mappings, by index into `mappings`, in file order.
    pub(super) regexes: Vec<usize>,
    pub(super) glob_disable_ordering: bool,
    /// What a statistic no mapping matched gets: `defaults:`' timer type and its options.
    pub(super) unmatched: Options,
}

/// One mapping of the file, checked and with its defaults applied.
#[derive(Debug)]
pub(super) struct CompiledMapping {
    pub(super) matcher: Matcher,
    pub(super) drop: bool,
    pub(super) name: Template,
    pub(super) labels: Vec<(String, Template)>,
    pub(super) options: Options,
    pub(super) help: Option<String>,
    pub(super) scale: Option<f64>,
}

#[derive(Debug)]
pub(super) enum Matcher {
    Glob,
    Regex {
        regex: regex::Regex,
        kind: Option<StatKind>,
    },
}

/// A mapping's timer settings after `defaults:`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Options {
    pub(super) timer_type: TimerType,
    pub(super) buckets: Vec<f64>,
    pub(super) quantiles: Vec<SummaryQuantile>,
}

/// What [`Mapper::map`] makes of a statistic.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapping {
    /// `action: drop`, or a name that maps (or escapes) to nothing: not exposed.
    Drop,
    Metric(Mapped),
}

/// A statistic's Prometheus series.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// A valid Prometheus metric name (escaped as statsd_exporter escapes it).
    pub name: String,
    /// In the mapping's order; values as substituted (any text).
    pub labels: Vec<(String, String)>,
    pub timer_type: TimerType,
    /// The histogram's buckets when `timer_type` is [`TimerType::Histogram`] (the mapping's,
    /// else `defaults:`', else [`DEFAULT_BUCKETS`]); `None` for a summary.
    pub buckets: Option<Vec<f64>>,
    /// The summary's quantiles when `timer_type` is [`TimerType::Summary`] (the mapping's, else
    /// `defaults:`', else [`DEFAULT_QUANTILES`]); `None` for a histogram.
    pub quantiles: Option<Vec<SummaryQuantile>>,
    /// The mapping's `help`, if it has a non-empty one.
    pub help: Option<String>,
    /// The mapping's `scale`: statsd_exporter multiplies every value by it.
    pub scale: Option<f64>,
    /// False when no mapping matched and `name` is the statistic's name escaped.
    pub matched: bool,
}

/// A mapping file that cannot be used: which file, which line (of the YAML error, or of the
/// mapping at fault, when known), what.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}{}: {message}", .line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct MapperError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl Options {
    /// A [`Mapped`] with these options and nothing else.
    pub(super) fn exposed(&self) -> Mapped {
        let histogram = self.timer_type == TimerType::Histogram;
        Mapped {
            name: String::new(),
            labels: Vec::new(),
            timer_type: self.timer_type,
            buckets: histogram.then(|| self.buckets.clone()),
            quantiles: (!histogram).then(|| self.quantiles.clone()),
            help: None,
            scale: None,
            matched: false,
        }
    }
}
