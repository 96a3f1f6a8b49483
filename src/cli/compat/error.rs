//! Why envoyproxy/ratelimit's environment cannot be translated: each error names the variable
//! and says what it needs.

/// An envoyproxy/ratelimit variable tollgate cannot act on as set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompatError {
    /// Not Go's `strconv.ParseBool` syntax.
    #[error(
        "{name}={value}: expected a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"
    )]
    Bool { name: String, value: String },
    #[error("LOG_LEVEL={0}: expected trace, debug, info, warn, error, fatal or panic")]
    LogLevel(String),
    #[error("LOG_FORMAT={0}: expected json or text")]
    LogFormat(String),
    #[error("CONFIG_TYPE={0}: expected FILE or GRPC_XDS_SOTW")]
    ConfigType(String),
    /// An xDS TLS file variable without `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`.
    #[error("{0} is set but CONFIG_GRPC_XDS_SERVER_USE_TLS is not true")]
    XdsTlsOff(&'static str),
    #[error("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES={0}: expected a number of bytes")]
    XdsMessageSize(String),
    #[error("PROMETHEUS_ADDR={0}: expected host:port or :port")]
    PrometheusAddr(String),
    #[error("STATSD_PORT={0}: expected a port number")]
    StatsdPort(String),
    /// `GRPC_SERVER_USE_TLS=true` without the certificate or key variable.
    #[error("GRPC_SERVER_USE_TLS=true needs {0}")]
    TlsNeeds(&'static str),
    #[error(
        "GRPC_CLIENT_TLS_SAN: tollgate checks that client certificates chain to \
         GRPC_CLIENT_TLS_CACERT but cannot yet require a SAN; unset it, or give the \
         client certificates a CA of their own"
    )]
    ClientSan,
    #[error("EXPIRATION_JITTER_MAX_SECONDS={0}: expected whole seconds")]
    Jitter(String),
    #[error(
        "BACKEND_TYPE={0}: tollgate stores counters in Redis (BACKEND_TYPE=redis) or \
         in memory (run `tollgate serve` without --redis-url)"
    )]
    Backend(String),
    #[error(
        "REDIS_PERSECOND=true: tollgate keeps every unit in one Redis; point \
         REDIS_URL at it and unset REDIS_PERSECOND"
    )]
    PerSecond,
    #[error("LOCAL_CACHE_SIZE_IN_BYTES={0}: expected a number")]
    CacheSize(String),
    #[error(
        "REDIS_URL is not set: envoyproxy/ratelimit's interface needs Redis \
         (host:port, or a socket path with REDIS_SOCKET_TYPE=unix)"
    )]
    NoRedisUrl,
    /// `REDIS_SOCKET_TYPE=unix` with another `REDIS_TYPE`.
    #[error("REDIS_SOCKET_TYPE=unix works with REDIS_TYPE=single, not {0}")]
    UnixNotSingle(String),
    #[error("REDIS_SOCKET_TYPE={0}: expected tcp or unix")]
    SocketType(String),
    /// `REDIS_TYPE=sentinel` with a `REDIS_URL` that names no sentinel.
    #[error("REDIS_TYPE=sentinel: REDIS_URL={0} must be master-name,host:port[,host:port…]")]
    SentinelUrl(String),
    #[error("REDIS_TYPE={0}: expected single, sentinel or cluster")]
    RedisType(String),
    #[error("TRACING_EXPORTER_PROTOCOL={0}: expected http or grpc")]
    TracingProtocol(String),
    #[error("TRACING_SAMPLING_RATE={0}: expected a number (0 to 1)")]
    SamplingRate(String),
}
