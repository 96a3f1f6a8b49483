//! `tollgate-bench`: a load generator for any Envoy rate limit service.
//!
//! It speaks nothing but `ShouldRateLimit`, so it measures tollgate, envoyproxy/ratelimit or
//! any other RLS server the same way. Two load shapes:
//!
//! - closed loop: `concurrency` workers each send their next request when the last one
//!   answers; this finds the throughput the server sustains.
//! - open loop (`--rate R`): request `i` is due at `start + i/R` whether or not earlier ones
//!   have answered, and its latency counts from that due time. A server that stalls shows up
//!   as latency, not as fewer requests sent (no coordinated omission).
//!
//! The pure parts (descriptor templates, key choice, schedule arithmetic, summaries and
//! rendering) are plain functions tested below; the I/O edges are [`run`], the closed-loop
//! workers and the open-loop scheduler thread.

mod args;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, TryAcquireError};
use tonic::transport::{Channel, Endpoint};

pub use crate::args::BenchArgs;
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitRequest;

type Client = RateLimitServiceClient<Channel>;

/// What `{key}` in a descriptor template is replaced with: the chosen key's number.
const KEY_PLACEHOLDER: &str = "{key}";

/// Open-loop results are recorded into this many locked tallies, so concurrent calls rarely
/// wait on one another's lock.
const TALLY_SHARDS: usize = 16;

/// Error bucket for client-side timeouts (the call took longer than `--timeout`).
const TIMEOUT: &str = "TIMEOUT";
/// Error bucket for open-loop requests that were due but never sent: the in-flight bound
/// was still full `--timeout` after the run ended.
const UNSENT: &str = "UNSENT";

// ---------------------------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------------------------

/// `--duration`, `--timeout`: a positive duration like `500ms`, `10s`, `1m`.
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    tollgate::duration::parse_positive(s)
}

/// `--warmup`: like [`duration_arg`], but `0s` turns it off.
pub fn duration_or_zero_arg(s: &str) -> Result<Duration, String> {
    tollgate::duration::parse(s)
}

/// `--rate`: requests per second, positive.
pub fn rate_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "'{s}' is not a positive number of requests per second"
        )),
    }
}

/// `--hot-share`: a fraction between 0 and 1.
pub fn share_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("'{s}' is not a fraction between 0 and 1")),
    }
}

// ---------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------

/// A descriptor given as `key=value,key2=value2` whose keys and values may hold `{key}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorTemplate {
    entries: Vec<(String, String)>,
}

impl DescriptorTemplate {
    pub fn parse(s: &str) -> Result<DescriptorTemplate, String> {
        let entries = s
            .split(',')
            .map(|part| {
                part.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| format!("--descriptor '{s}': '{part}' is not key=value"))
            })
            .collect::<Result<_, _>>()?;
        Ok(DescriptorTemplate { entries })
    }

    pub fn uses_key(&self) -> bool {
        self.entries
            .iter()
            .any(|(k, v)| k.contains(KEY_PLACEHOLDER) || v.contains(KEY_PLACEHOLDER))
    }

    /// The descriptor for key number `key`.
    pub fn expand(&self, key: usize) -> RateLimitDescriptor {
        let key = key.to_string();
        RateLimitDescriptor {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.replace(KEY_PLACEHOLDER, &key),
                    value: v.replace(KEY_PLACEHOLDER, &key),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// One request per key, built once up front; a call clones the one it sends.
pub fn build_requests(
    domain: &str,
    templates: &[DescriptorTemplate],
    keys: usize,
    hits: u32,
) -> Result<Vec<RateLimitRequest>, String> {
    if keys > 1 && !templates.iter().any(DescriptorTemplate::uses_key) {
        return Err(format!(
            "--keys {keys}: no --descriptor contains {KEY_PLACEHOLDER}, so every key would send \
             the same request"
        ));
    }
    Ok((0..keys.max(1))
        .map(|key| RateLimitRequest {
            domain: domain.to_string(),
            descriptors: templates.iter().map(|t| t.expand(key)).collect(),
            hits_addend: hits,
        })
        .collect())
}

// ---------------------------------------------------------------------------------------
// Key choice
// ---------------------------------------------------------------------------------------

/// SplitMix64: small and fast, plenty for spreading load (not for anything secret).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Maps a uniform `r` onto `0..n` without modulo bias (Lemire's multiply-shift).
fn below(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

/// Which key each request goes to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyChoice {
    keys: usize,
    /// `Some(s)`: a share `s` of requests go to key 0, the rest uniformly to keys `1..keys`.
    /// `None`: uniform over all keys.
    hot_share: Option<f64>,
}

impl KeyChoice {
    pub fn new(keys: usize, hot_share: Option<f64>) -> KeyChoice {
        KeyChoice {
            keys: keys.max(1),
            hot_share,
        }
    }

    pub fn pick(&self, rng: &mut SplitMix64) -> usize {
        if self.keys == 1 {
            return 0;
        }
        match self.hot_share {
            None => below(rng.next_u64(), self.keys),
            Some(share) if rng.next_f64() < share => 0,
            Some(_) => 1 + below(rng.next_u64(), self.keys - 1),
        }
    }

    fn describe(&self) -> String {
        match (self.keys, self.hot_share) {
            (1, _) => "1 key".to_string(),
            (n, None) => format!("{n} keys, uniform"),
            (n, Some(s)) => format!("{n} keys, {:.1}% on key 0", s * 100.0),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Schedule (open loop)
// ---------------------------------------------------------------------------------------

/// When request `i` is due, counted from the start of the run.
pub fn due_offset(i: u64, rate: f64) -> Duration {
    Duration::from_secs_f64(i as f64 / rate)
}

/// How many requests from number `from` on are due inside `[measure_from, end)`.
pub fn due_between(from: u64, rate: f64, measure_from: Duration, end: Duration) -> u64 {
    (from..)
        .map(|i| due_offset(i, rate))
        .take_while(|&due| due < end)
        .filter(|&due| due >= measure_from)
        .count() as u64
}

/// Sleeps until shortly before `due`, then spins: OS sleeps overshoot by tens of
/// microseconds, and every microsecond late would be counted as server latency.
fn wait_until(due: Instant) {
    const SPIN: Duration = Duration::from_micros(200);
    let now = Instant::now();
    if due > now + SPIN {
        std::thread::sleep(due - now - SPIN);
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

// ---------------------------------------------------------------------------------------
// Outcomes and tallies
// ---------------------------------------------------------------------------------------

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
    fn of_code(overall_code: i32) -> Outcome {
        match Code::try_from(overall_code) {
            Ok(Code::Ok) => Outcome::Ok,
            Ok(Code::OverLimit) => Outcome::OverLimit,
            _ => Outcome::Unknown,
        }
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

fn new_histogram() -> Histogram<u64> {
    // Auto-resizing, 3 significant digits: both constant and valid.
    Histogram::new(3).expect("3 significant digits is a valid histogram precision")
}

/// Records `d` in µs. The histogram grows to fit (`saturating_record` would instead clamp to
/// its current top, which starts at about 2 ms).
fn record_us(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    if h.record(us).is_err() {
        h.saturating_record(us);
    }
}

/// Counts and latencies of the measured calls. Each closed-loop worker keeps its own; the
/// open loop records into shards; all are merged at the end.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Latency of answered calls (OK, OVER_LIMIT, UNKNOWN), in µs. Errors are counted, not
    /// timed: a fast failure would make the server look quicker than it is.
    latency_us: Histogram<u64>,
    ok: u64,
    over_limit: u64,
    unknown: u64,
    errors: BTreeMap<&'static str, u64>,
    last_done: Option<Instant>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
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
        if !matches!(outcome, Outcome::Error(_)) {
            record_us(&mut self.latency_us, latency);
        }
        self.last_done = self.last_done.max(Some(done));
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

    pub fn calls(&self) -> u64 {
        self.ok + self.over_limit + self.unknown + self.errors.values().sum::<u64>()
    }
}

// ---------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------

/// Latency percentiles in µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

pub fn summarize(h: &Histogram<u64>) -> LatencySummary {
    LatencySummary {
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        mean_us: h.mean(),
    }
}

/// What only the open loop measures: how well the schedule was kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduleStats {
    pub target_rate: f64,
    /// Measured requests actually sent before the run's end, per second of the window.
    pub sent_per_sec: f64,
    /// Requests due while `concurrency` calls were already in flight; they were sent when
    /// one finished, and their latency still counts from the due time.
    pub late: u64,
    /// Requests due but never sent (the in-flight bound stayed full too long).
    pub unsent: u64,
    /// How far behind its due time a request left the scheduler, in µs.
    pub send_lag_p99_us: u64,
    pub send_lag_max_us: u64,
}

/// Everything one run measured, ready to print as a table or as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub addr: String,
    pub domain: String,
    pub keys: KeyChoice,
    pub concurrency: usize,
    pub connections: usize,
    pub warmup_s: f64,
    /// From the start of measuring until the last measured call finished.
    pub duration_s: f64,
    /// Measured requests: calls made (answered or failed) plus open-loop requests never sent.
    pub requests: u64,
    pub ok: u64,
    pub over_limit: u64,
    pub unknown: u64,
    /// Failed calls by gRPC status name, plus `TIMEOUT` and `UNSENT`.
    pub errors: BTreeMap<&'static str, u64>,
    pub latency: LatencySummary,
    /// `None` for the closed loop.
    pub schedule: Option<ScheduleStats>,
}

impl Report {
    /// Answered calls (whatever the answer).
    pub fn decisions(&self) -> u64 {
        self.ok + self.over_limit + self.unknown
    }

    pub fn decisions_per_sec(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.decisions() as f64 / self.duration_s
        } else {
            0.0
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    fn load_line(&self) -> String {
        let conns = format!(
            "{} in flight over {} connection{}",
            self.concurrency,
            self.connections,
            if self.connections == 1 { "" } else { "s" }
        );
        match &self.schedule {
            None => format!("closed loop, {conns}, {}", self.keys.describe()),
            Some(s) => format!(
                "open loop at {}/s, at most {conns}, {}",
                s.target_rate,
                self.keys.describe()
            ),
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let mut row = |label: &str, value: String| {
            let _ = writeln!(out, "{label:<13}{value}");
        };
        row("target", format!("{}  domain {}", self.addr, self.domain));
        row("load", self.load_line());
        row(
            "measured",
            format!(
                "{:.2} s after {:.2} s warmup",
                self.duration_s, self.warmup_s
            ),
        );
        row("requests", self.requests.to_string());
        row("decisions/s", format!("{:.1}", self.decisions_per_sec()));
        row("ok", self.ok.to_string());
        row("over_limit", self.over_limit.to_string());
        if self.unknown > 0 {
            row("unknown", self.unknown.to_string());
        }
        let errors = if self.errors.is_empty() {
            "0".to_string()
        } else {
            let parts: Vec<String> = self
                .errors
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            format!("{} ({})", self.error_count(), parts.join(", "))
        };
        row("errors", errors);
        let l = &self.latency;
        row(
            "latency",
            format!(
                "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
                human_us(l.p50_us),
                human_us(l.p90_us),
                human_us(l.p99_us),
                human_us(l.p999_us),
                human_us(l.max_us)
            ),
        );
        if let Some(s) = &self.schedule {
            row(
                "schedule",
                format!(
                    "sent {:.1}/s, late {}, unsent {}, send lag p99 {} max {}",
                    s.sent_per_sec,
                    s.late,
                    s.unsent,
                    human_us(s.send_lag_p99_us),
                    human_us(s.send_lag_max_us)
                ),
            );
        }
        out
    }

    /// One JSON object; every key is always present (`null` where a mode has no value).
    pub fn json(&self) -> serde_json::Value {
        let s = self.schedule.as_ref();
        serde_json::json!({
            "mode": if s.is_some() { "open" } else { "closed" },
            "addr": self.addr,
            "domain": self.domain,
            "keys": self.keys.keys,
            "hot_share": self.keys.hot_share,
            "concurrency": self.concurrency,
            "connections": self.connections,
            "warmup_s": self.warmup_s,
            "duration_s": round3(self.duration_s),
            "requests": self.requests,
            "decisions": self.decisions(),
            "decisions_per_sec": round3(self.decisions_per_sec()),
            "ok": self.ok,
            "over_limit": self.over_limit,
            "unknown": self.unknown,
            "errors": self.error_count(),
            "errors_by_code": self.errors,
            "p50_us": self.latency.p50_us,
            "p90_us": self.latency.p90_us,
            "p99_us": self.latency.p99_us,
            "p999_us": self.latency.p999_us,
            "max_us": self.latency.max_us,
            "mean_us": round3(self.latency.mean_us),
            "target_rate": s.map(|s| s.target_rate),
            "sent_per_sec": s.map(|s| round3(s.sent_per_sec)),
            "late": s.map(|s| s.late),
            "unsent": s.map(|s| s.unsent),
            "send_lag_p99_us": s.map(|s| s.send_lag_p99_us),
            "send_lag_max_us": s.map(|s| s.send_lag_max_us),
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `850 µs`, `1.25 ms`, `2.00 s`.
pub fn human_us(us: u64) -> String {
    if us < 1_000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{:.2} ms", us as f64 / 1e3)
    } else {
        format!("{:.2} s", us as f64 / 1e6)
    }
}

/// One progress line: time since start, phase, calls finished, rate over the last tick.
pub fn progress_line(elapsed: Duration, phase: &str, calls: u64, rate: f64, errors: u64) -> String {
    format!(
        "{:>6.1}s  {phase:<7}  calls {calls}  rate {rate:.0}/s  errors {errors}",
        elapsed.as_secs_f64()
    )
}

// ---------------------------------------------------------------------------------------
// Running the load
// ---------------------------------------------------------------------------------------

/// The run's three moments: load starts, measuring starts (after warmup), load stops.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    measure_start: Instant,
    end: Instant,
}

impl Window {
    fn phase(&self, now: Instant) -> &'static str {
        if now < self.measure_start {
            "warmup"
        } else if now < self.end {
            "measure"
        } else {
            "drain"
        }
    }
}

/// Live counters for the progress line; every call, warmup included.
#[derive(Debug, Default)]
struct Progress {
    calls: AtomicU64,
    errors: AtomicU64,
    /// Whether a `\r` line is on the terminal and needs a newline at the end.
    open_line: AtomicBool,
}

impl Progress {
    fn record(&self, outcome: Outcome) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if matches!(outcome, Outcome::Error(_)) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What every worker and call shares.
struct Load {
    requests: Vec<RateLimitRequest>,
    keys: KeyChoice,
    timeout: Duration,
    window: Window,
    progress: Progress,
    seed: u64,
}

impl Load {
    fn rng(&self, stream: u64) -> SplitMix64 {
        SplitMix64::new(self.seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }
}

async fn call(client: &mut Client, req: RateLimitRequest, timeout: Duration) -> Outcome {
    match tokio::time::timeout(timeout, client.should_rate_limit(req)).await {
        Err(_) => Outcome::Error(TIMEOUT),
        Ok(Err(status)) => Outcome::Error(status_name(status.code())),
        Ok(Ok(resp)) => Outcome::of_code(resp.get_ref().overall_code),
    }
}

/// One client per HTTP/2 connection: each `connect` opens its own.
async fn connect(addr: &str, connections: usize) -> anyhow::Result<Vec<Client>> {
    let endpoint = Endpoint::from_shared(addr.to_string())
        .with_context(|| format!("--addr '{addr}' is not a URL"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5));
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        let channel = endpoint
            .connect()
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        clients.push(RateLimitServiceClient::new(channel));
    }
    Ok(clients)
}

fn spawn_progress(load: Arc<Load>) -> tokio::task::JoinHandle<()> {
    let tty = std::io::stderr().is_terminal();
    tokio::spawn(async move {
        let start = load.window.start;
        let mut ticks = tokio::time::interval_at(
            tokio::time::Instant::from_std(start + Duration::from_secs(1)),
            Duration::from_secs(1),
        );
        let (mut last_calls, mut last_at) = (0, start);
        loop {
            ticks.tick().await;
            let now = Instant::now();
            let calls = load.progress.calls.load(Ordering::Relaxed);
            let rate = (calls - last_calls) as f64 / (now - last_at).as_secs_f64();
            let line = progress_line(
                now - start,
                // The phase the interval just measured was mostly in.
                load.window.phase(last_at + (now - last_at) / 2),
                calls,
                rate,
                load.progress.errors.load(Ordering::Relaxed),
            );
            if tty {
                eprint!("\r{line}\x1b[K");
                load.progress.open_line.store(true, Ordering::Relaxed);
            } else {
                eprintln!("{line}");
            }
            (last_calls, last_at) = (calls, now);
        }
    })
}

async fn closed_worker(load: Arc<Load>, worker: usize, mut clients: Vec<Client>) -> Tally {
    let mut rng = load.rng(worker as u64);
    let mut tally = Tally::new();
    // Worker w sends its n-th request on connection (w + n) mod K: round-robin overall.
    let mut next_conn = worker;
    loop {
        let sent = Instant::now();
        if sent >= load.window.end {
            return tally;
        }
        let req = load.requests[load.keys.pick(&mut rng)].clone();
        let conns = clients.len();
        let outcome = call(&mut clients[next_conn % conns], req, load.timeout).await;
        next_conn += 1;
        let done = Instant::now();
        load.progress.record(outcome);
        if sent >= load.window.measure_start {
            tally.record(outcome, done - sent, done);
        }
    }
}

async fn closed_loop(
    load: Arc<Load>,
    clients: &[Client],
    concurrency: usize,
) -> anyhow::Result<Tally> {
    let workers: Vec<_> = (0..concurrency)
        .map(|w| tokio::spawn(closed_worker(load.clone(), w, clients.to_vec())))
        .collect();
    let mut tally = Tally::new();
    for w in workers {
        tally.merge(&w.await.context("bench worker failed")?)?;
    }
    Ok(tally)
}

/// What the open-loop scheduler thread counted itself.
struct Sent {
    measured: u64,
    in_window: u64,
    late: u64,
    unsent: u64,
    lag_us: Histogram<u64>,
}

/// The open-loop scheduler, on its own OS thread so that it can sleep and spin precisely
/// without holding up a runtime worker. Each due request takes an in-flight permit (waiting
/// for one if all `concurrency` are taken) and is spawned onto the runtime.
fn schedule(
    load: Arc<Load>,
    clients: Vec<Client>,
    rate: f64,
    permits: Arc<Semaphore>,
    shards: Arc<Vec<Mutex<Tally>>>,
    runtime: Handle,
) -> Sent {
    let w = load.window;
    // A request still unsent this long after the end would be a timeout anyway.
    let give_up = tokio::time::Instant::from_std(w.end + load.timeout);
    let mut rng = load.rng(u64::MAX);
    let mut sent = Sent {
        measured: 0,
        in_window: 0,
        late: 0,
        unsent: 0,
        lag_us: new_histogram(),
    };
    let mut i: u64 = 0;
    loop {
        let due = w.start + due_offset(i, rate);
        if due >= w.end {
            break;
        }
        let measured = due >= w.measure_start;
        wait_until(due);
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::NoPermits) => {
                sent.late += u64::from(measured);
                let wait = tokio::time::timeout_at(give_up, permits.clone().acquire_owned());
                match runtime.block_on(wait) {
                    Ok(Ok(p)) => p,
                    _ => break,
                }
            }
            Err(TryAcquireError::Closed) => break,
        };
        let now = Instant::now();
        if measured {
            sent.measured += 1;
            sent.in_window += u64::from(now < w.end);
            record_us(&mut sent.lag_us, now - due);
        }
        let req = load.requests[load.keys.pick(&mut rng)].clone();
        let mut client = clients[(i % clients.len() as u64) as usize].clone();
        let (load, shards) = (load.clone(), shards.clone());
        let shard = (i % TALLY_SHARDS as u64) as usize;
        runtime.spawn(async move {
            let outcome = call(&mut client, req, load.timeout).await;
            let done = Instant::now();
            load.progress.record(outcome);
            if measured {
                shards[shard].lock().record(outcome, done - due, done);
            }
            drop(permit);
        });
        i += 1;
    }
    sent.unsent = due_between(i, rate, w.measure_start - w.start, w.end - w.start);
    sent
}

async fn open_loop(
    load: Arc<Load>,
    clients: Vec<Client>,
    rate: f64,
    concurrency: usize,
) -> anyhow::Result<(Tally, ScheduleStats)> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let shards: Arc<Vec<Mutex<Tally>>> = Arc::new(
        (0..TALLY_SHARDS)
            .map(|_| Mutex::new(Tally::new()))
            .collect(),
    );
    let sent = tokio::task::spawn_blocking({
        let (load, permits, shards) = (load.clone(), permits.clone(), shards.clone());
        let runtime = Handle::current();
        move || schedule(load, clients, rate, permits, shards, runtime)
    })
    .await
    .context("bench scheduler failed")?;
    // Every permit back means every call has finished (or timed out).
    let all = u32::try_from(concurrency).context("--concurrency too large")?;
    let _drained = permits.acquire_many(all).await?;
    let mut tally = Tally::new();
    for shard in shards.iter() {
        tally.merge(&shard.lock())?;
    }
    if sent.unsent > 0 {
        tally.errors.insert(UNSENT, sent.unsent);
    }
    let window = (load.window.end - load.window.measure_start).as_secs_f64();
    let stats = ScheduleStats {
        target_rate: rate,
        sent_per_sec: sent.in_window as f64 / window,
        late: sent.late,
        unsent: sent.unsent,
        send_lag_p99_us: sent.lag_us.value_at_quantile(0.99),
        send_lag_max_us: sent.lag_us.max(),
    };
    debug_assert_eq!(tally.calls(), sent.measured + sent.unsent);
    Ok((tally, stats))
}

/// Runs the benchmark described by `args` and returns the table or JSON to print.
pub async fn run(args: &BenchArgs) -> anyhow::Result<String> {
    let templates = args
        .descriptors
        .iter()
        .map(|d| DescriptorTemplate::parse(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let keys = args.keys as usize;
    let requests = build_requests(&args.domain, &templates, keys, args.hits.unwrap_or(0))
        .map_err(anyhow::Error::msg)?;
    let concurrency = args.concurrency as usize;
    let connections = args.connections as usize;
    let clients = connect(&args.addr, connections).await?;

    let start = Instant::now();
    let measure_start = start + args.warmup;
    let load = Arc::new(Load {
        requests,
        keys: KeyChoice::new(keys, args.hot_share),
        timeout: args.timeout,
        window: Window {
            start,
            measure_start,
            end: measure_start + args.duration,
        },
        progress: Progress::default(),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    });
    let progress = spawn_progress(load.clone());
    let result = match args.rate {
        None => closed_loop(load.clone(), &clients, concurrency)
            .await
            .map(|t| (t, None)),
        Some(rate) => open_loop(load.clone(), clients, rate, concurrency)
            .await
            .map(|(t, s)| (t, Some(s))),
    };
    progress.abort();
    // Wait for the abort to land, so no progress line can follow the final newline.
    let _ = progress.await;
    if load.progress.open_line.load(Ordering::Relaxed) {
        eprintln!();
    }
    let (tally, schedule) = result?;

    let last = tally
        .last_done
        .map_or(load.window.end, |d| d.max(load.window.end));
    let report = Report {
        addr: args.addr.clone(),
        domain: args.domain.clone(),
        keys: load.keys,
        concurrency,
        connections,
        warmup_s: args.warmup.as_secs_f64(),
        duration_s: (last - measure_start).as_secs_f64(),
        requests: tally.calls(),
        ok: tally.ok,
        over_limit: tally.over_limit,
        unknown: tally.unknown,
        errors: tally.errors.clone(),
        latency: summarize(&tally.latency_us),
        schedule,
    };
    Ok(if args.json {
        format!("{}\n", report.json())
    } else {
        report.table()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entries(d: &RateLimitDescriptor) -> Vec<(&str, &str)> {
        d.entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect()
    }

    #[test]
    fn template_expands_key_everywhere_it_appears() {
        let t = DescriptorTemplate::parse("tenant=t{key},model=gpt,{key}=x").unwrap();
        assert!(t.uses_key());
        assert_eq!(
            entries(&t.expand(42)),
            vec![("tenant", "t42"), ("model", "gpt"), ("42", "x")]
        );
        let fixed = DescriptorTemplate::parse("remote_address=10.0.0.1").unwrap();
        assert!(!fixed.uses_key());
        assert_eq!(
            entries(&fixed.expand(7)),
            vec![("remote_address", "10.0.0.1")]
        );
    }

    #[test]
    fn template_errors_name_the_bad_part() {
        let e = DescriptorTemplate::parse("tenant={key},model").unwrap_err();
        assert!(e.contains("'model' is not key=value"), "{e}");
    }

    #[test]
    fn requests_are_built_once_per_key() {
        let ts = [
            DescriptorTemplate::parse("tenant={key}").unwrap(),
            DescriptorTemplate::parse("model=gpt").unwrap(),
        ];
        let reqs = build_requests("edge", &ts, 3, 5).unwrap();
        assert_eq!(reqs.len(), 3);
        assert_eq!(entries(&reqs[2].descriptors[0]), vec![("tenant", "2")]);
        assert_eq!(entries(&reqs[2].descriptors[1]), vec![("model", "gpt")]);
        assert!(reqs
            .iter()
            .all(|r| r.domain == "edge" && r.hits_addend == 5));

        assert_eq!(build_requests("edge", &ts[1..], 1, 0).unwrap().len(), 1);
        let e = build_requests("edge", &ts[1..], 10, 0).unwrap_err();
        assert!(e.contains("--keys 10"), "{e}");
    }

    fn shares(choice: KeyChoice, n: usize) -> Vec<f64> {
        let mut rng = SplitMix64::new(7);
        let mut counts = vec![0u64; choice.keys];
        for _ in 0..n {
            counts[choice.pick(&mut rng)] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn uniform_choice_spreads_evenly() {
        for s in shares(KeyChoice::new(10, None), 200_000) {
            assert!((s - 0.1).abs() < 0.005, "{s}");
        }
    }

    #[test]
    fn hot_share_goes_to_key_zero_and_the_rest_spreads() {
        let s = shares(KeyChoice::new(5, Some(0.9)), 200_000);
        assert!((s[0] - 0.9).abs() < 0.005, "{s:?}");
        for &other in &s[1..] {
            assert!((other - 0.025).abs() < 0.003, "{s:?}");
        }
        assert_eq!(shares(KeyChoice::new(5, Some(1.0)), 1000)[0], 1.0);
        assert_eq!(shares(KeyChoice::new(5, Some(0.0)), 1000)[0], 0.0);
        assert_eq!(shares(KeyChoice::new(1, Some(0.0)), 1000), vec![1.0]);
    }

    #[test]
    fn below_covers_the_range_edges() {
        assert_eq!(below(0, 10), 0);
        assert_eq!(below(u64::MAX, 10), 9);
        assert_eq!(below(u64::MAX / 2, 2), 0);
        assert_eq!(below(u64::MAX / 2 + 1, 2), 1);
    }

    proptest! {
        #[test]
        fn picks_stay_in_range(keys in 1usize..1000, share in proptest::option::of(0.0f64..=1.0),
                               seed: u64) {
            let choice = KeyChoice::new(keys, share);
            let mut rng = SplitMix64::new(seed);
            for _ in 0..100 {
                prop_assert!(choice.pick(&mut rng) < keys);
            }
        }

        #[test]
        fn unit_floats_are_in_range(seed: u64) {
            let mut rng = SplitMix64::new(seed);
            for _ in 0..100 {
                let f = rng.next_f64();
                prop_assert!((0.0..1.0).contains(&f));
            }
        }
    }

    #[test]
    fn schedule_is_evenly_spaced() {
        assert_eq!(due_offset(0, 2000.0), Duration::ZERO);
        assert_eq!(due_offset(1, 2000.0), Duration::from_micros(500));
        assert_eq!(due_offset(2000, 2000.0), Duration::from_secs(1));
        assert_eq!(due_offset(1, 3.0), Duration::from_nanos(333_333_333));
    }

    #[test]
    fn due_between_counts_the_measured_window() {
        let s = Duration::from_secs;
        // 100/s, 1 s warmup, 2 s measured: requests 100..300 are measured.
        assert_eq!(due_between(0, 100.0, s(1), s(3)), 200);
        assert_eq!(due_between(250, 100.0, s(1), s(3)), 50);
        assert_eq!(due_between(50, 100.0, s(1), s(3)), 200);
        assert_eq!(due_between(300, 100.0, s(1), s(3)), 0);
    }

    #[test]
    fn duration_flags() {
        assert_eq!(duration_arg("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration_arg("250ms"), Ok(Duration::from_millis(250)));
        assert!(duration_arg("0s").is_err());
        assert!(duration_arg("10").is_err());
        assert_eq!(duration_or_zero_arg("0s"), Ok(Duration::ZERO));
        assert_eq!(duration_or_zero_arg("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(rate_arg("2000"), Ok(2000.0));
        assert_eq!(rate_arg("0.5"), Ok(0.5));
        assert!(rate_arg("0").is_err() && rate_arg("-1").is_err() && rate_arg("inf").is_err());
        assert_eq!(share_arg("0.9"), Ok(0.9));
        assert!(share_arg("1.5").is_err() && share_arg("x").is_err());
    }

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
        let l = summarize(&a.latency_us);
        assert_eq!((l.p50_us, l.max_us), (200, 300));
    }

    #[test]
    fn summary_percentiles_within_three_digits() {
        let mut h = new_histogram();
        for v in 1..=100_000 {
            h.record(v).unwrap();
        }
        let l = summarize(&h);
        let close = |got: u64, want: u64| (got as f64 - want as f64).abs() / want as f64 <= 0.001;
        assert!(close(l.p50_us, 50_000), "{l:?}");
        assert!(close(l.p90_us, 90_000), "{l:?}");
        assert!(close(l.p99_us, 99_000), "{l:?}");
        assert!(close(l.p999_us, 99_900), "{l:?}");
        assert!(close(l.max_us, 100_000), "{l:?}");
        assert!((l.mean_us - 50_000.5).abs() < 50.0, "{l:?}");
        assert_eq!(summarize(&new_histogram()).max_us, 0);

        let mut t = Tally::new();
        let now = Instant::now();
        t.record(Outcome::Ok, Duration::from_micros(10), now);
        t.record(Outcome::Ok, Duration::from_secs(3), now);
        let l = summarize(&t.latency_us);
        assert_eq!(l.p50_us, 10);
        assert!(close(l.max_us, 3_000_000), "{l:?}");
    }

    #[test]
    fn status_names_follow_the_grpc_spec() {
        assert_eq!(status_name(tonic::Code::Unavailable), "UNAVAILABLE");
        assert_eq!(
            status_name(tonic::Code::DeadlineExceeded),
            "DEADLINE_EXCEEDED"
        );
        assert_eq!(Outcome::of_code(Code::OverLimit as i32), Outcome::OverLimit);
        assert_eq!(Outcome::of_code(0), Outcome::Unknown);
    }

    #[test]
    fn latencies_print_in_a_readable_unit() {
        assert_eq!(human_us(850), "850 µs");
        assert_eq!(human_us(1_250), "1.25 ms");
        assert_eq!(human_us(2_000_000), "2.00 s");
    }

    fn sample_report(schedule: Option<ScheduleStats>) -> Report {
        Report {
            addr: "http://127.0.0.1:8081".into(),
            domain: "edge".into(),
            keys: KeyChoice::new(100, Some(0.9)),
            concurrency: 64,
            connections: 4,
            warmup_s: 2.0,
            duration_s: 5.0,
            requests: 10_003,
            ok: 8_000,
            over_limit: 2_000,
            unknown: 0,
            errors: BTreeMap::from([("TIMEOUT", 1), ("UNAVAILABLE", 2)]),
            latency: LatencySummary {
                p50_us: 420,
                p90_us: 900,
                p99_us: 1_500,
                p999_us: 3_000,
                max_us: 12_000,
                mean_us: 500.0,
            },
            schedule,
        }
    }

    #[test]
    fn table_shows_every_measure() {
        let t = sample_report(None).table();
        assert!(
            t.contains("closed loop, 64 in flight over 4 connections, 100 keys, 90.0% on key 0")
        );
        assert!(t.contains("decisions/s  2000.0\n"), "{t}");
        assert!(
            t.contains("errors       3 (TIMEOUT 1, UNAVAILABLE 2)\n"),
            "{t}"
        );
        assert!(t.contains(
            "latency      p50 420 µs  p90 900 µs  p99 1.50 ms  p99.9 3.00 ms  max 12.00 ms"
        ));
        assert!(!t.contains("unknown") && !t.contains("schedule"), "{t}");

        let open = sample_report(Some(ScheduleStats {
            target_rate: 2000.0,
            sent_per_sec: 1999.8,
            late: 3,
            unsent: 0,
            send_lag_p99_us: 45,
            send_lag_max_us: 310,
        }))
        .table();
        assert!(
            open.contains("open loop at 2000/s, at most 64 in flight"),
            "{open}"
        );
        assert!(open.contains(
            "schedule     sent 1999.8/s, late 3, unsent 0, send lag p99 45 µs max 310 µs"
        ));
    }

    #[test]
    fn json_has_the_same_numbers() {
        let j = sample_report(None).json();
        assert_eq!(j["mode"], "closed");
        assert_eq!(j["decisions_per_sec"], 2000.0);
        assert_eq!(j["requests"], 10_003);
        assert_eq!(j["ok"], 8_000);
        assert_eq!(j["over_limit"], 2_000);
        assert_eq!(j["errors"], 3);
        assert_eq!(j["errors_by_code"]["UNAVAILABLE"], 2);
        assert_eq!(j["p50_us"], 420);
        assert_eq!(j["p999_us"], 3_000);
        assert_eq!(j["max_us"], 12_000);
        assert_eq!(j["duration_s"], 5.0);
        assert_eq!(j["hot_share"], 0.9);
        assert!(j["target_rate"].is_null() && j["late"].is_null());
    }

    #[test]
    fn progress_line_reads_at_a_glance() {
        assert_eq!(
            progress_line(Duration::from_millis(3000), "measure", 45_123, 15_012.4, 0),
            "   3.0s  measure  calls 45123  rate 15012/s  errors 0"
        );
    }
}
