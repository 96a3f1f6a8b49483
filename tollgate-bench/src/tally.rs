//! How calls ended, counted: outcomes, latency histograms and error buckets.
//!
//! Each closed-loop worker keeps its own [`Tally`]; the open loop records into a few locked
//! shards. They are merged once at the end, and [`crate::report`] turns the sum into a report.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::pb::rls::rate_limit_response::Code;

/// Error bucket for client-side timeouts (the call took longer than `--timeout`).
pub const TIMEOUT: &str = "TIMEOUT";
/// Error bucket for open-loop requests that were due but never sent: the in-flight bound
/// was still full `--timeout` after the run ended.
pub const UNSENT: &str = "UNSENT";

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    OverLimit,
    /// An answer whose overall code is neither OK nor OVER_LIMIT.
    Unknown,
    /// A gRPC status name such as `UNAVAILABLE`, or [`TIMEOUT`].
    Error(&'static str),
}

impl Outcome {
    /// The outcome of an answer with this `overall_code`.
    pub fn of_code(overall_code: i32) -> Outcome {
        match Code::try_from(overall_code) {
            Ok(Code::Ok) => Outcome::Ok,
            Ok(Code::OverLimit) => Outcome::OverLimit,
            _ => Outcome::Unknown,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Outcome::Error(_))
    }
}

/// The canonical gRPC name of a status code, as in the gRPC spec.
pub fn status_name(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// An empty µs histogram: auto-resizing, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    // Both settings are constants, and valid.
    Histogram::new(3).expect("3 significant digits is a valid histogram precision")
}

/// Records `d` in µs. The histogram grows to fit (`saturating_record` would instead clamp to
/// its current top, which starts at about 2 ms).
pub fn record_us(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    if h.record(us).is_err() {
        h.saturating_record(us);
    }
}

/// Counts and latencies of the measured calls.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Latency of answered calls (OK, OVER_LIMIT, UNKNOWN), in µs. Errors are counted, not
    /// timed: a fast failure would make the server look quicker than it is.
    pub(crate) latency_us: Histogram<u64>,
    pub(crate) ok: u64,
    pub(crate) over_limit: u64,
    pub(crate) unknown: u64,
    pub(crate) errors: BTreeMap<&'static str, u64>,
    /// When the last recorded call finished.
    pub(crate) last_done: Option<Instant>,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            latency_us: new_histogram(),
            ok: 0,
            over_limit: 0,
            unknown: 0,
            errors: BTreeMap::new(),
            last_done: None,
        }
    }

    pub fn record(&mut self, outcome: Outcome, latency: Duration, done: Instant) {
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::OverLimit => self.over_limit += 1,
            Outcome::Unknown => self.unknown += 1,
            Outcome::Error(name) => *self.errors.entry(name).or_default() += 1,
        }
        if !outcome.is_error() {
            record_us(&mut self.latency_us, latency);
        }
        self.last_done = self.last_done.max(Some(done));
    }

    /// Counts `n` open-loop requests that were due but never sent, as [`UNSENT`] errors.
    pub fn record_unsent(&mut self, n: u64) {
        if n > 0 {
            *self.errors.entry(UNSENT).or_default() += n;
        }
    }

    pub fn merge(&mut self, other: &Tally) -> anyhow::Result<()> {
        self.latency_us
            .add(&other.latency_us)
            .map_err(|e| anyhow::anyhow!("merging latency histograms: {e:?}"))?;
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.unknown += other.unknown;
        for (name, n) in &other.errors {
            *self.errors.entry(*name).or_default() += n;
        }
        self.last_done = self.last_done.max(other.last_done);
        Ok(())
    }

    /// Every recorded request: answered, failed or unsent.
    pub fn calls(&self) -> u64 {
        self.ok + self.over_limit + self.unknown + self.errors.values().sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_outcomes_and_times_only_answers() {
        let now = Instant::now();
        let mut a = Tally::new();
        a.record(Outcome::Ok, Duration::from_micros(100), now);
        a.record(Outcome::OverLimit, Duration::from_micros(300), now);
        a.record(Outcome::Error("UNAVAILABLE"), Duration::from_micros(1), now);
        let mut b = Tally::new();
        let later = now + Duration::from_millis(5);
        b.record(Outcome::Error(TIMEOUT), Duration::from_secs(1), later);
        b.record(Outcome::Error("UNAVAILABLE"), Duration::from_micros(1), now);
        b.record(Outcome::Unknown, Duration::from_micros(200), now);
        a.merge(&b).unwrap();
        assert_eq!((a.ok, a.over_limit, a.unknown), (1, 1, 1));
        assert_eq!(
            a.errors,
            BTreeMap::from([("TIMEOUT", 1), ("UNAVAILABLE", 2)])
        );
        assert_eq!(a.calls(), 6);
        assert_eq!(a.latency_us.len(), 3);
        assert_eq!(a.last_done, Some(later));
        assert_eq!(a.latency_us.value_at_quantile(0.5), 200);
        assert_eq!(a.latency_us.max(), 300);

        a.record_unsent(0);
        assert!(!a.errors.contains_key(UNSENT));
        a.record_unsent(4);
        assert_eq!((a.errors[UNSENT], a.calls()), (4, 10));
    }

    #[test]
    fn long_latencies_grow_the_histogram() {
        let mut t = Tally::new();
        let now = Instant::now();
        t.record(Outcome::Ok, Duration::from_micros(10), now);
        t.record(Outcome::Ok, Duration::from_secs(3), now);
        assert_eq!(t.latency_us.value_at_quantile(0.5), 10);
        let max = t.latency_us.max() as f64;
        assert!((max - 3e6).abs() / 3e6 <= 0.001, "{max}");
    }

    #[test]
    fn status_names_follow_the_grpc_spec() {
        assert_eq!(status_name(tonic::Code::Unavailable), "UNAVAILABLE");
        assert_eq!(
            status_name(tonic::Code::DeadlineExceeded),
            "DEADLINE_EXCEEDED"
        );
        assert_eq!(Outcome::of_code(Code::Ok as i32), Outcome::Ok);
        assert_eq!(Outcome::of_code(Code::OverLimit as i32), Outcome::OverLimit);
        assert_eq!(Outcome::of_code(0), Outcome::Unknown);
        assert_eq!(Outcome::of_code(99), Outcome::Unknown);
    }
}
