//! The command line of `tollgate-bench`: its flags and the parsers of their values.
//!
//! [`BenchArgs`] is flattened into the binary's parser (`main.rs`) and handed whole to
//! [`crate::run`]. Durations use [`tollgate::base::duration`], the project's one duration syntax.

use std::time::Duration;

use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Server URL.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_ADDR",
        default_value = "http://127.0.0.1:8081"
    )]
    pub addr: String,
    #[arg(long, env = "TOLLGATE_BENCH_DOMAIN")]
    pub domain: String,
    /// One descriptor template as `key=value,key2=value2`, where `{key}` is replaced by the
    /// chosen key number (0..keys); repeat for several descriptors per request.
    #[arg(long = "descriptor", required = true)]
    pub descriptors: Vec<String>,
    /// How many distinct values `{key}` takes.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_KEYS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub keys: u32,
    /// Send this fraction of requests to key 0 and spread the rest over the other keys;
    /// absent: every key equally likely.
    #[arg(long, env = "TOLLGATE_BENCH_HOT_SHARE", value_parser = share_arg)]
    pub hot_share: Option<f64>,
    /// The requests' hits_addend (absent: 0, which servers read as 1).
    #[arg(long, env = "TOLLGATE_BENCH_HITS")]
    pub hits: Option<u32>,
    /// Requests in flight at once (closed loop: the number of workers).
    #[arg(
        long,
        env = "TOLLGATE_BENCH_CONCURRENCY",
        default_value_t = 64,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub concurrency: u32,
    /// HTTP/2 connections; requests are spread round-robin over them.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_CONNECTIONS",
        default_value_t = 4,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub connections: u32,
    /// How long to measure, e.g. `10s`.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_DURATION",
        default_value = "10s",
        value_parser = duration_arg
    )]
    pub duration: Duration,
    /// Load before measuring starts, not counted; `0s` for none.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_WARMUP",
        default_value = "2s",
        value_parser = duration_or_zero_arg
    )]
    pub warmup: Duration,
    /// Open loop: send this many requests per second on a fixed schedule and measure latency
    /// from each request's intended send time. Absent: closed loop.
    #[arg(long, env = "TOLLGATE_BENCH_RATE", value_parser = rate_arg)]
    pub rate: Option<f64>,
    /// Per-request timeout; a call past it counts as a TIMEOUT error.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_TIMEOUT",
        default_value = "1s",
        value_parser = duration_arg
    )]
    pub timeout: Duration,
    /// Send each call's deadline as `grpc-timeout` (Envoy's filter sends its timeout, 20 ms
    /// by default), so the server may answer by it; absent, calls carry none (as grpcurl's).
    #[arg(long, env = "TOLLGATE_BENCH_GRPC_TIMEOUT", value_parser = duration_arg)]
    pub grpc_timeout: Option<Duration>,
    /// Threads the generator runs on; 0 = one per core. On a box it shares with the server
    /// it measures, `--threads 1` leaves the other cores to the server (and its Redis).
    #[arg(long, env = "TOLLGATE_BENCH_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Print one JSON object instead of the table.
    #[arg(long, env = "TOLLGATE_BENCH_JSON")]
    pub json: bool,
}

/// `--duration`, `--timeout`: a positive duration like `500ms`, `10s`, `1m`.
pub fn duration_arg(s: &str) -> Result<Duration, tollgate::base::duration::DurationError> {
    tollgate::base::duration::parse_positive(s)
}

/// `--warmup`: like [`duration_arg`], but `0s` turns it off.
pub fn duration_or_zero_arg(s: &str) -> Result<Duration, tollgate::base::duration::DurationError> {
    tollgate::base::duration::parse(s)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
