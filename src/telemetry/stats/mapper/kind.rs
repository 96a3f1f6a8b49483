//! The kinds of statistics a mapping can match (`match_metric_type`), and how a timer is
//! exposed (histogram or summary, with statsd_exporter's default buckets and quantiles).

/// What kind of statistic a name belongs to, for `match_metric_type` (`counter`, `gauge`,
/// `observer` or its old name `timer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatKind {
    Counter,
    Gauge,
    Timer,
}

impl StatKind {
    pub(super) const ALL: [StatKind; 3] = [StatKind::Counter, StatKind::Gauge, StatKind::Timer];

    pub(super) fn index(self) -> usize {
        match self {
            StatKind::Counter => 0,
            StatKind::Gauge => 1,
            StatKind::Timer => 2,
        }
    }
}

/// How a timer (observer) is exposed: `timer_type`/`observer_type`. Without one (in the
/// mapping or in `defaults:`), statsd_exporter makes a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimerType {
    #[default]
    Summary,
    Histogram,
}

/// One of a summary's quantiles: `{quantile: 0.99, error: 0.001}`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryQuantile {
    #[serde(default)]
    pub quantile: f64,
    #[serde(default)]
    pub error: f64,
}

/// Prometheus's default histogram buckets (client_golang's `DefBuckets`), statsd_exporter's
/// default when neither the mapping nor `defaults:` gives buckets.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// statsd_exporter's default summary quantiles (quantile, allowed error).
pub const DEFAULT_QUANTILES: [SummaryQuantile; 3] = [
    SummaryQuantile {
        quantile: 0.5,
        error: 0.05,
    },
    SummaryQuantile {
        quantile: 0.9,
        error: 0.01,
    },
    SummaryQuantile {
        quantile: 0.99,
        error: 0.001,
    },
];
