//! The command line of `tollgate-bench`.

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
    #[arg(long, env = "TOLLGATE_BENCH_HOT_SHARE", value_parser = crate::share_arg)]
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
        value_parser = crate::duration_arg
    )]
    pub duration: std::time::Duration,
    /// Load before measuring starts, not counted; `0s` for none.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_WARMUP",
        default_value = "2s",
        value_parser = crate::duration_or_zero_arg
    )]
    pub warmup: std::time::Duration,
    /// Open loop: send this many requests per second on a fixed schedule and measure latency
    /// from each request's intended send time. Absent: closed loop.
    #[arg(long, env = "TOLLGATE_BENCH_RATE", value_parser = crate::rate_arg)]
    pub rate: Option<f64>,
    /// Per-request timeout; a call past it counts as a TIMEOUT error.
    #[arg(
        long,
        env = "TOLLGATE_BENCH_TIMEOUT",
        default_value = "1s",
        value_parser = crate::duration_arg
    )]
    pub timeout: std::time::Duration,
    /// Print one JSON object instead of the table.
    #[arg(long, env = "TOLLGATE_BENCH_JSON")]
    pub json: bool,
}
