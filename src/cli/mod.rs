//! The command line: `serve` (its trace flags in [`traces`]), `check-config` and `query`.
//! Every flag can also be set with a `TOLLGATE_*` environment variable.

pub mod compat;
pub mod counters;
pub mod query;
pub mod region;
pub mod top;
pub mod traces;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::base::duration;
use crate::base::pairs::{parse_pairs, Pairs};
use crate::config::load::FileSelection;
use crate::config::usage::UsageDomains;
use crate::config::xds;
use crate::service::settings::FailureMode;
use crate::telemetry::logging::LogFormat;
use crate::telemetry::stats::registry::DEFAULT_NEAR_LIMIT_RATIO;

use self::traces::TraceArgs;

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version = crate::base::version::LONG,
    about = "Envoy-compatible gRPC rate-limit decision service"
)]
pub struct Cli {
    /// Log filter (tracing-subscriber syntax), e.g. `info` or `tollgate=debug`.
    #[arg(long, global = true, env = "TOLLGATE_LOG", default_value = "info")]
    pub log: String,
    /// How log lines are written: `text`, or `json` (one object per line).
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormatArg,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the rate limit service.
    Serve(Box<ServeArgs>),
    /// Validate a config file or directory and print the compiled limits.
    CheckConfig(CheckConfigArgs),
    /// Ask a running service one ShouldRateLimit question and print the answer.
    Query(QueryArgs),
    /// Show every counter a descriptor reaches, without charging (GET /counters).
    Counters(crate::cli::counters::CountersArgs),
    /// Reset a descriptor's counters on purpose (POST /counters/reset on the write listener).
    Reset(crate::cli::counters::ResetArgs),
    /// Who is being limited right now, from one instance or several (GET /top).
    Top(crate::cli::top::TopArgs),
    /// Move global limits' home to another region's Redis, never granting a window twice
    /// (docs/multi-region.md, "Moving home").
    MoveHome(crate::cli::region::MoveHomeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Config file, or directory of YAML files (envoyproxy/ratelimit format). Or, instead,
    /// --config-xds.
    #[arg(
        long,
        env = "TOLLGATE_CONFIG",
        required_unless_present = "config_xds",
        conflicts_with = "config_xds"
    )]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub xds: XdsArgs,
    /// Readiness also needs a config with at least one domain (envoyproxy/ratelimit's
    /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
    #[arg(long, env = "TOLLGATE_READY_NEEDS_CONFIG")]
    pub ready_needs_config: bool,
    /// gRPC listen address (ShouldRateLimit and grpc.health.v1). `[::]` is dual-stack and
    /// falls back to 0.0.0.0 where the host has no IPv6.
    #[arg(long, env = "TOLLGATE_GRPC_ADDR", default_value = "[::]:8081")]
    pub grpc_addr: SocketAddr,
    /// HTTP admin listen address (/healthcheck, /healthz, /readyz, /metrics, /rlconfig, and
    /// POST /json with --admin-json).
    #[arg(long, env = "TOLLGATE_HTTP_ADDR", default_value = "[::]:8080")]
    pub http_addr: SocketAddr,
    /// Also serve the admin endpoints here (envoyproxy/ratelimit's debug port, 6070).
    #[arg(long, env = "TOLLGATE_DEBUG_ADDR")]
    pub debug_addr: Option<SocketAddr>,
    /// Also serve the admin endpoints (/metrics) here, e.g. a dedicated metrics port.
    #[arg(long, env = "TOLLGATE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Also serve /metrics under this path on every admin address (envoyproxy/ratelimit's
    /// PROMETHEUS_PATH).
    #[arg(long, env = "TOLLGATE_METRICS_PATH", default_value = "/metrics", value_parser = metrics_path)]
    pub metrics_path: String,
    /// No envoyproxy/ratelimit statistics (the `ratelimit_*` series) at all; /metrics then
    /// serves tollgate's own metrics only, as OpenMetrics.
    #[arg(long, env = "TOLLGATE_DISABLE_STATS")]
    pub disable_stats: bool,
    /// A statsd_exporter mapping file that names envoyproxy/ratelimit's statistics on
    /// /metrics. Default: envoyproxy/ratelimit's built-in mapping.
    #[arg(long, env = "TOLLGATE_PROMETHEUS_MAPPER")]
    pub prometheus_mapper: Option<PathBuf>,
    /// envoyproxy/ratelimit's near_limit statistic counts hits above this share of a limit.
    #[arg(long, env = "TOLLGATE_NEAR_LIMIT_RATIO", default_value_t = DEFAULT_NEAR_LIMIT_RATIO, value_parser = near_limit_ratio)]
    pub near_limit_ratio: f32,
    #[command(flatten)]
    pub statsd: crate::telemetry::stats::statsd::StatsdArgs,
    #[command(flatten)]
    pub admin: crate::cli::counters::AdminArgs,
    #[command(flatten)]
    pub regions: crate::cli::region::RegionArgs,
    /// gRPC server TLS: certificate chain (PEM). Needs --grpc-tls-key.
    #[arg(long, env = "TOLLGATE_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// gRPC server TLS: private key (PEM).
    #[arg(long, env = "TOLLGATE_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<PathBuf>,
    /// Mutual TLS: clients must present a certificate signed by this CA (PEM).
    #[arg(long, env = "TOLLGATE_GRPC_CLIENT_CA", requires = "grpc_tls_cert")]
    pub grpc_client_ca: Option<PathBuf>,
    /// Close each gRPC connection gracefully after this long (e.g. `30m`), so clients
    /// rebalance onto new replicas. Default: never.
    #[arg(long, env = "TOLLGATE_GRPC_MAX_CONNECTION_AGE", value_parser = duration::parse_positive)]
    pub grpc_max_connection_age: Option<Duration>,
    /// After --grpc-max-connection-age, how long open calls may take before the connection
    /// is closed regardless. Default: no limit.
    #[arg(long, env = "TOLLGATE_GRPC_MAX_CONNECTION_AGE_GRACE", value_parser = duration::parse_positive)]
    pub grpc_max_connection_age_grace: Option<Duration>,
    /// Open gRPC connections at most; one more is closed as soon as it is accepted. (A client
    /// must also send HTTP/2's preface within 10 s of connecting.)
    #[arg(
        long,
        env = "TOLLGATE_GRPC_MAX_CONNECTIONS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub grpc_max_connections: u32,
    /// HTTP/2 PING interval on idle gRPC connections (a dead peer is dropped after 20 s
    /// without an answer); `off` disables.
    #[arg(long, env = "TOLLGATE_GRPC_KEEPALIVE", default_value = "60s", value_parser = parse_switchable)]
    pub grpc_keepalive: Switchable,
    /// Calls open at once on one gRPC connection; a stream past it is refused.
    #[arg(long, env = "TOLLGATE_GRPC_MAX_CONCURRENT_STREAMS", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub grpc_max_concurrent_streams: u32,
    /// Close a gRPC connection gracefully once no call has been open on it for this long;
    /// `off` never does.
    #[arg(long, env = "TOLLGATE_GRPC_MAX_CONNECTION_IDLE", default_value = "1h", value_parser = parse_switchable)]
    pub grpc_max_connection_idle: Switchable,
    /// The kill switch: answer every request OK without reading or writing the store
    /// (counted as code DISABLED). Per domain: `disabled: true` in its config file.
    #[arg(long, env = "TOLLGATE_DISABLED")]
    pub disabled: bool,
    /// Which files of a config directory are read: `yaml` (*.yaml, *.yml), `all` (every
    /// file but dotfiles), `all-with-dotfiles` (envoyproxy/ratelimit's runtime directory).
    #[arg(long, env = "TOLLGATE_CONFIG_FILES", default_value = "yaml", value_parser = parse_files)]
    pub config_files: FileSelection,
    /// Allow several files to declare one domain; their descriptors are merged.
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// Usage domains, `GLOB,GLOB,…` (`*` = any run of characters): every limit of a matching
    /// domain is an overdraft limit, so usage charged after the fact (Envoy's
    /// `apply_on_stream_done` token charge) always lands and a check of cost 0 is OVER_LIMIT
    /// once nothing is left. A request-time charge there lands even past the limit too.
    #[arg(long, env = "TOLLGATE_USAGE_DOMAINS", value_parser = UsageDomains::parse)]
    pub usage_domains: Option<UsageDomains>,
    /// Descriptor keys, `KEY,KEY,…`, whose value pairs a request's two calls (Envoy Gateway's
    /// request cost and response cost, over xDS) into a reservation and its settle: the first
    /// call with a value reserves its cost, the second settles with its cost as the actual use.
    /// The value (e.g. the edge's `x-request-id`, under a distinct match's key) is left out of
    /// matching and counter keys. See docs/configuration.md, "Reservations".
    #[arg(long, env = "TOLLGATE_RESERVATION_PAIR_KEYS", value_delimiter = ',')]
    pub reservation_pair_keys: Vec<String>,
    /// How often to check the config for changes, e.g. `5s`; `off` disables reloading.
    #[arg(long, env = "TOLLGATE_CONFIG_RELOAD_INTERVAL", default_value = "5s", value_parser = parse_switchable)]
    pub config_reload_interval: Switchable,
    /// Global shadow mode: statuses report the truth, but the overall code is always OK.
    #[arg(long, env = "TOLLGATE_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Charge every descriptor on every request, even when the request is over the limit
    /// (envoyproxy/ratelimit's behaviour). Off: a denied request charges nothing.
    #[arg(long, env = "TOLLGATE_COUNT_REJECTED")]
    pub count_rejected: bool,
    /// Add RateLimit-Limit / -Remaining / -Reset (and Retry-After when over) to responses.
    #[arg(long, env = "TOLLGATE_RESPONSE_HEADERS")]
    pub response_headers: bool,
    #[arg(long, env = "TOLLGATE_HEADER_LIMIT", default_value = "RateLimit-Limit")]
    pub header_limit: String,
    #[arg(
        long,
        env = "TOLLGATE_HEADER_REMAINING",
        default_value = "RateLimit-Remaining"
    )]
    pub header_remaining: String,
    #[arg(long, env = "TOLLGATE_HEADER_RESET", default_value = "RateLimit-Reset")]
    pub header_reset: String,
    #[arg(
        long,
        env = "TOLLGATE_HEADER_RETRY_AFTER",
        default_value = "Retry-After"
    )]
    pub header_retry_after: String,
    /// Add dynamic metadata (domain, descriptors, rule metadata) to responses.
    #[arg(long, env = "TOLLGATE_DYNAMIC_METADATA")]
    pub dynamic_metadata: bool,
    /// Most descriptors one request may carry.
    #[arg(long, env = "TOLLGATE_MAX_DESCRIPTORS", default_value_t = 64)]
    pub max_descriptors: usize,
    /// Most entries one descriptor may carry.
    #[arg(long, env = "TOLLGATE_MAX_ENTRIES", default_value_t = 16)]
    pub max_entries: usize,
    /// Longest entry key or value, in bytes.
    #[arg(long, env = "TOLLGATE_MAX_VALUE_LEN", default_value_t = 1024)]
    pub max_value_len: usize,
    /// Largest cost one descriptor (or request) may carry; more is INVALID_ARGUMENT.
    #[arg(
        long,
        env = "TOLLGATE_MAX_HITS",
        default_value_t = crate::service::validate::DEFAULT_MAX_HITS,
        value_parser = clap::value_parser!(u64).range(1..=crate::service::validate::MAX_MAX_HITS)
    )]
    pub max_hits: u64,
    /// What to answer when the store fails: error (gRPC UNAVAILABLE), allow, deny, or local
    /// (an in-process limiter, each limit divided by --local-fallback-share).
    #[arg(
        long,
        env = "TOLLGATE_FAILURE_MODE",
        value_enum,
        default_value = "error"
    )]
    pub failure_mode: FailureModeArg,
    /// `--failure-mode local`: how many replicas share each limit while the store is down
    /// (each limit becomes max(1, limit / N)).
    #[arg(
        long,
        env = "TOLLGATE_LOCAL_FALLBACK_SHARE",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub local_fallback_share: u32,
    /// Also tell clients when the store failed (header x-tollgate-store-failure); the marker
    /// always goes into the response's dynamic metadata and the metrics.
    #[arg(long, env = "TOLLGATE_STORE_FAILURE_HEADER")]
    pub store_failure_header: bool,
    /// Time between readiness going NOT_SERVING and the listeners closing on shutdown.
    #[arg(long, env = "TOLLGATE_DRAIN_DELAY", default_value = "0s", value_parser = duration::parse)]
    pub drain_delay: Duration,
    /// After the drain, how long in-flight calls and open streams may take before exit.
    #[arg(long, env = "TOLLGATE_SHUTDOWN_GRACE", default_value = "10s", value_parser = duration::parse)]
    pub shutdown_grace: Duration,
    /// Use Redis instead of the in-memory store: redis://[user:pass@]host:port[/db],
    /// rediss://… (TLS), redis-cluster://host:port[,host:port…],
    /// redis-sentinel://host:port[,host:port…]/service[/db].
    #[arg(long, env = "TOLLGATE_REDIS_URL")]
    pub redis_url: Option<String>,
    /// TLS (`rediss://`): trust this CA certificate (PEM) instead of the system's roots.
    #[arg(long, env = "TOLLGATE_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// TLS: present this client certificate (PEM) for mutual TLS; needs --redis-client-key.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_CLIENT_CERT",
        requires = "redis_client_key"
    )]
    pub redis_client_cert: Option<PathBuf>,
    /// TLS: the client certificate's private key (PEM).
    #[arg(
        long,
        env = "TOLLGATE_REDIS_CLIENT_KEY",
        requires = "redis_client_cert"
    )]
    pub redis_client_key: Option<PathBuf>,
    /// File holding the Redis password (overrides one in the URL; never logged).
    #[arg(long, env = "TOLLGATE_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,
    /// Prefix for every Redis key (must not contain braces).
    #[arg(long, env = "TOLLGATE_REDIS_KEY_PREFIX", default_value = "tg:")]
    pub redis_key_prefix: String,
    /// The longest one decision waits on Redis; past it the failure mode answers. A caller's
    /// grpc-timeout shortens it (less a tenth, at least 8 ms but at most half, for the answer's way back: 12 ms
    /// for Envoy's 20 ms filter); a caller that sends none gets it whole.
    #[arg(long, env = "TOLLGATE_REDIS_TIMEOUT", default_value = "1s", value_parser = duration::parse_positive)]
    pub redis_timeout: Duration,
    /// How long opening one Redis connection (TCP, TLS, AUTH) may take.
    #[arg(long, env = "TOLLGATE_REDIS_CONNECT_TIMEOUT", default_value = "1s", value_parser = duration::parse_positive)]
    pub redis_connect_timeout: Duration,
    /// Where the Redis scripts take "now" from: redis (TIME, every replica agrees) or local.
    #[arg(long, env = "TOLLGATE_CLOCK", value_enum, default_value = "redis")]
    pub clock: ClockArg,
    /// Most memory the in-memory store's counters may hold: `N`, `NKiB`, `NMiB` or `NGiB`.
    /// Past it the entries closest to expiry are evicted (counted in a metric).
    #[arg(
        long,
        env = "TOLLGATE_MAX_STORE_BYTES",
        default_value = "64MiB",
        value_parser = parse_bytes
    )]
    pub max_store_bytes: usize,
    /// Most decisions in flight at once; more get RESOURCE_EXHAUSTED at once instead of
    /// queueing.
    #[arg(
        long,
        env = "TOLLGATE_MAX_IN_FLIGHT",
        default_value_t = 4096,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_in_flight: u32,
    /// Most answers held at once (`max_wait` on a token bucket: a request that fits within its
    /// wait is admitted and its answer held until then); a request finding them all taken is
    /// decided without waiting. 0 = never hold.
    #[arg(long, env = "TOLLGATE_MAX_HELD", default_value_t = 10_000)]
    pub max_held: usize,
    /// Threads serving gRPC connections, each a single-threaded runtime holding its
    /// connections for good; 0 = one per available core.
    #[arg(long, env = "TOLLGATE_SERVING_THREADS", default_value_t = 0)]
    pub serving_threads: usize,
    /// Redis Cluster: answer requests that charge nothing (every descriptor's cost 0) from
    /// replicas; requests that charge always go to the primaries.
    #[arg(long, env = "TOLLGATE_READ_REPLICAS")]
    pub read_replicas: bool,
    /// Answer a decision that charges only once this many replicas of the primary hold its
    /// charges (Redis `WAIT` after each script call, within --redis-timeout); short of it,
    /// the failure mode answers. 0 = off (Redis's asynchronous replication: a failover or a
    /// partition can lose admitted charges).
    #[arg(long, env = "TOLLGATE_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,
    /// Entries in the local over-limit cache (Redis store); 0 disables it.
    #[arg(long, env = "TOLLGATE_LOCAL_CACHE_SIZE", default_value_t = 100_000)]
    pub local_cache_size: usize,
    #[command(flatten)]
    pub traces: TraceArgs,
}

/// The config from an xDS control plane (state of the world), as Envoy Gateway serves it.
#[derive(Debug, Args)]
pub struct XdsArgs {
    /// Read the config from this xDS server instead of files: `host:port` or
    /// `http://host:port`, `https://host:port` for TLS (Envoy Gateway: its rate limit xDS
    /// server, `envoy-gateway:18001`, over mutual TLS).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS")]
    pub config_xds: Option<String>,
    /// The node id sent to the xDS server (Envoy Gateway's answers `envoy-ratelimit`).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_NODE_ID", default_value = "default")]
    pub config_xds_node_id: String,
    /// The node's metadata, `k1:v1,k2:v2` (`k1=v1` too).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_NODE_METADATA", value_parser = parse_pairs)]
    pub config_xds_node_metadata: Option<Pairs>,
    /// gRPC metadata sent with the xDS stream, `k1:v1,k2:v2`.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_HEADERS", value_parser = parse_pairs)]
    pub config_xds_headers: Option<Pairs>,
    /// Largest xDS response accepted.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_MAX_MESSAGE_SIZE", default_value = "4MiB", value_parser = parse_bytes)]
    pub config_xds_max_message_size: usize,
    /// The first delay before reconnecting to a lost xDS server; it doubles per attempt.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_BACKOFF_INITIAL", default_value = "10s", value_parser = duration::parse_positive)]
    pub config_xds_backoff_initial: Duration,
    /// The longest delay between reconnect attempts (before jitter).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_BACKOFF_MAX", default_value = "60s", value_parser = duration::parse_positive)]
    pub config_xds_backoff_max: Duration,
    /// With jitter, each delay is drawn from delay × [1 − f, 1 + f].
    #[arg(
        long,
        env = "TOLLGATE_CONFIG_XDS_BACKOFF_RANDOM_FACTOR",
        default_value_t = 0.5
    )]
    pub config_xds_backoff_random_factor: f64,
    /// Spread reconnect delays at random (`false` turns it off).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_BACKOFF_JITTER", default_value_t = true, action = clap::ArgAction::Set)]
    pub config_xds_backoff_jitter: bool,
    /// https:// xDS server: trust this CA (PEM) instead of the system's roots.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_CA", requires = "config_xds")]
    pub config_xds_ca: Option<PathBuf>,
    /// https:// xDS server: present this client certificate (PEM), mutual TLS.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_CLIENT_CERT", requires_all = ["config_xds", "config_xds_client_key"])]
    pub config_xds_client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "TOLLGATE_CONFIG_XDS_CLIENT_KEY",
        requires = "config_xds_client_cert"
    )]
    pub config_xds_client_key: Option<PathBuf>,
    /// The name the xDS server's certificate must carry (default: the host of --config-xds).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_SAN", requires = "config_xds")]
    pub config_xds_san: Option<String>,
    /// Serve before the first xDS config arrives (unknown domains answer OK meanwhile).
    /// Without it nothing listens until a config has compiled.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_START_WITHOUT_CONFIG")]
    pub config_xds_start_without_config: bool,
}

impl XdsArgs {
    /// The xDS options, when `--config-xds` is set.
    pub fn options(&self) -> Option<xds::XdsOptions> {
        let server = self.config_xds.clone()?;
        Some(xds::XdsOptions {
            node_id: self.config_xds_node_id.clone(),
            node_metadata: self.config_xds_node_metadata.clone().unwrap_or_default().0,
            headers: self.config_xds_headers.clone().unwrap_or_default().0,
            max_message_size: self.config_xds_max_message_size,
            backoff: xds::backoff::Backoff {
                initial: self.config_xds_backoff_initial,
                max: self.config_xds_backoff_max,
                random_factor: self.config_xds_backoff_random_factor,
                jitter: self.config_xds_backoff_jitter,
            },
            ca: self.config_xds_ca.clone(),
            client_cert: self
                .config_xds_client_cert
                .clone()
                .zip(self.config_xds_client_key.clone()),
            san: self.config_xds_san.clone(),
            start_without_config: self.config_xds_start_without_config,
            ..xds::XdsOptions::new(server)
        })
    }
}

/// A flag value tollgate's own parsers refuse (clap names the flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagValueError {
    #[error("'{0}' is not one of yaml, all, all-with-dotfiles")]
    FileSelection(String),
    #[error("'{0}' is not a size like 67108864, 512KiB, 64MiB or 1GiB")]
    Size(String),
}

fn parse_files(text: &str) -> Result<FileSelection, FlagValueError> {
    match text {
        "yaml" => Ok(FileSelection::Yaml),
        "all" => Ok(FileSelection::All {
            ignore_dotfiles: true,
        }),
        "all-with-dotfiles" => Ok(FileSelection::All {
            ignore_dotfiles: false,
        }),
        _ => Err(FlagValueError::FileSelection(text.to_string())),
    }
}

/// A duration flag that `off` (or `0`) disables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switchable(pub Option<Duration>);

fn parse_switchable(text: &str) -> Result<Switchable, duration::DurationError> {
    duration::parse_optional(text).map(Switchable)
}

/// `--failure-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureModeArg {
    Error,
    Allow,
    Deny,
    Local,
}

impl From<FailureModeArg> for FailureMode {
    fn from(a: FailureModeArg) -> FailureMode {
        match a {
            FailureModeArg::Error => FailureMode::Error,
            FailureModeArg::Allow => FailureMode::Allow,
            FailureModeArg::Deny => FailureMode::Deny,
            FailureModeArg::Local => FailureMode::Local,
        }
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormatArg {
    Text,
    Json,
}

impl From<LogFormatArg> for LogFormat {
    fn from(a: LogFormatArg) -> LogFormat {
        match a {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockArg {
    Redis,
    Local,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// Config file or directory.
    #[arg(env = "TOLLGATE_CONFIG")]
    pub path: PathBuf,
    #[arg(long, env = "TOLLGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// As `serve --usage-domains`: the limits printed are the ones serve would enforce.
    #[arg(long, env = "TOLLGATE_USAGE_DOMAINS", value_parser = UsageDomains::parse)]
    pub usage_domains: Option<UsageDomains>,
    /// As `serve --region`: a global limit must list it. Without it, a file with global
    /// limits is checked for every region they name.
    #[arg(long, env = "TOLLGATE_REGION")]
    pub region: Option<String>,
    /// Print envoyproxy/ratelimit's lines (`unit=MINUTE requests_per_unit=…`, as `GET
    /// /rlconfig` serves them) instead of each limit in its own terms.
    #[arg(long)]
    pub dump: bool,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// Server URL, e.g. http://127.0.0.1:8081.
    #[arg(long, env = "TOLLGATE_ADDR", default_value = "http://127.0.0.1:8081")]
    pub addr: String,
    #[arg(long, env = "TOLLGATE_DOMAIN")]
    pub domain: String,
    /// One descriptor as `key=value,key2=value2`, optionally followed by `;hits=N` for that
    /// descriptor's own hits_addend (`;hits=0` asks without charging). Repeat for several
    /// descriptors.
    #[arg(long = "descriptor", required = true)]
    pub descriptors: Vec<String>,
    /// The request's hits_addend.
    #[arg(long)]
    pub hits: Option<u32>,
    /// Print the response as proto3 JSON instead of one line per descriptor.
    #[arg(long)]
    pub json: bool,
}

/// A size as the `bytesize` crate reads it: `67108864`, `512KiB`, `64MiB`, `1GiB`, or in
/// decimal units `64MB`; more than 0.
pub fn parse_bytes(text: &str) -> Result<usize, FlagValueError> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .ok()
        .and_then(|size| usize::try_from(size.as_u64()).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| FlagValueError::Size(text.to_string()))
}

/// `--metrics-path`: an absolute path no other admin route uses.
fn metrics_path(text: &str) -> Result<String, StatsFlagError> {
    if !text.starts_with('/') || text.contains(['?', '#', '{', '}', '*', ':']) {
        return Err(StatsFlagError::Path);
    }
    if crate::admin::ROUTES.contains(&text) {
        return Err(StatsFlagError::PathTaken(text.to_string()));
    }
    Ok(text.to_string())
}

/// A bad `--metrics-path` or `--near-limit-ratio`.
#[derive(Debug, thiserror::Error)]
pub enum StatsFlagError {
    #[error("expected a path such as /metrics")]
    Path,
    #[error("{0} is another admin endpoint")]
    PathTaken(String),
    #[error("expected a number from 0 to 1")]
    Ratio,
}

/// `--near-limit-ratio`: from 0 to 1.
fn near_limit_ratio(text: &str) -> Result<f32, StatsFlagError> {
    match text.parse::<f32>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(StatsFlagError::Ratio),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("512KiB"), Ok(512 << 10));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("64MB"), Ok(64_000_000));
        for bad in ["", "0", "0MiB", "-1", "lots", "64 parsecs"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
