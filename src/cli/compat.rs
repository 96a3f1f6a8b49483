//! envoyproxy/ratelimit's interface: when the binary is invoked as `ratelimit` (the image's
//! `/bin/ratelimit`, as Istio's and other manifests run it) it takes no arguments and reads
//! envoyproxy/ratelimit's environment variables instead.
//!
//! Each variable becomes the `serve` flag that does the same thing, so there is one code
//! path and `serve --help` documents it. A `TOLLGATE_*` variable that is also set wins (its
//! flag is not generated). Variables tollgate does not implement are named once at startup;
//! ones whose silent omission would change answers or security are errors.

mod args;
pub mod error;
mod stats;
mod tracing;
mod xds;

use std::ffi::OsString;

use self::args::{Builder, Get, GetBool};
use self::error::CompatError;

/// Whether argv[0] asks for envoyproxy/ratelimit's interface.
pub fn invoked_as_ratelimit(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "ratelimit")
}

/// The command line envoyproxy/ratelimit's environment stands for, and what to log once
/// logging is set up.
#[derive(Debug, PartialEq, Eq)]
pub struct Translation {
    pub args: Vec<OsString>,
    /// Warnings: variables accepted but not acted on, or acted on differently.
    pub notes: Vec<String>,
}

/// Variables of envoyproxy/ratelimit that tollgate reads no further than naming them.
const NOT_IMPLEMENTED: &[&str] = &[
    "REDIS_POOL_SIZE",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_POOL_ON_EMPTY_WAIT_DURATION",
    "GOSTATS_FLUSH_INTERVAL_SECONDS",
    "USE_DOG_STATSD_MOGRIFIERS",
    "GRPC_UDS",
    "DEBUG_LOG_HEADERS",
    "MEMCACHE_HOST_PORT",
    "MEMCACHE_SRV",
    "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_MAX_IDLE_CONNS",
];

/// Translates the environment `env` into `tollgate serve …` arguments (`argv0` first).
pub fn translate(
    argv0: OsString,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Translation, CompatError> {
    let mut t = Builder {
        env,
        args: vec![argv0],
        notes: Vec::new(),
    };
    let get = |name: &str| env(name).filter(|v| !v.is_empty());
    let flag_bool = |name: &str| -> Result<Option<bool>, CompatError> {
        get(name).map(|v| go_bool(name, &v)).transpose()
    };

    // Log flags are global: they go before the subcommand.
    if let Some(level) = get("LOG_LEVEL") {
        t.flag("log", &log_level(&level)?);
    }
    if let Some(format) = get("LOG_FORMAT") {
        let format = format.to_ascii_lowercase();
        if format != "json" && format != "text" {
            return Err(CompatError::LogFormat(format));
        }
        t.flag("log-format", &format);
    }
    t.args.push("serve".into());

    match get("CONFIG_TYPE").as_deref() {
        None | Some("FILE") => runtime_directory(&mut t, &get, &flag_bool)?,
        Some("GRPC_XDS_SOTW") => xds::translate(&mut t, &get, &flag_bool)?,
        Some(other) => return Err(CompatError::ConfigType(other.to_string())),
    }
    t.switch("merge-domains", flag_bool("MERGE_DOMAIN_CONFIG")?);
    t.switch(
        "ready-needs-config",
        flag_bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")?,
    );

    // Listeners. tollgate's default host is `::` (dual-stack, 0.0.0.0 without IPv6).
    let addr = |host: Option<String>, port: Option<String>, default_port: u16| {
        let host = host.unwrap_or_else(|| "::".into());
        let port = port.unwrap_or_else(|| default_port.to_string());
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    t.flag("http-addr", &addr(get("HOST"), get("PORT"), 8080));
    t.flag("grpc-addr", &addr(get("GRPC_HOST"), get("GRPC_PORT"), 8081));
    t.flag(
        "debug-addr",
        &addr(get("DEBUG_HOST"), get("DEBUG_PORT"), 6070),
    );
    let use_prometheus = flag_bool("USE_PROMETHEUS")?.unwrap_or(false);
    if use_prometheus {
        let prometheus = get("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let (host, port) = prometheus
            .rsplit_once(':')
            .ok_or_else(|| CompatError::PrometheusAddr(prometheus.clone()))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        t.flag(
            "metrics-addr",
            &addr(
                (!host.is_empty()).then(|| host.to_string()),
                Some(port.into()),
                9090,
            ),
        );
    }
    if let Some(age) = get("GRPC_MAX_CONNECTION_AGE") {
        t.flag("grpc-max-connection-age", &age);
    }
    if let Some(grace) = get("GRPC_MAX_CONNECTION_AGE_GRACE") {
        t.flag("grpc-max-connection-age-grace", &grace);
    }
    if flag_bool("GRPC_SERVER_USE_TLS")?.unwrap_or(false) {
        let need = |name: &'static str| get(name).ok_or(CompatError::TlsNeeds(name));
        t.flag("grpc-tls-cert", &need("GRPC_SERVER_TLS_CERT")?);
        t.flag("grpc-tls-key", &need("GRPC_SERVER_TLS_KEY")?);
        // envoyproxy/ratelimit verifies clients against GRPC_CLIENT_TLS_CACERT only; Envoy
        // Gateway sets GRPC_SERVER_TLS_CA_CERT (which envoyproxy/ratelimit never reads) to
        // the CA that signed its proxies' client certificate, which they always present:
        // tollgate verifies them against it.
        if let Some(ca) = get("GRPC_CLIENT_TLS_CACERT").or_else(|| get("GRPC_SERVER_TLS_CA_CERT")) {
            t.flag("grpc-client-ca", &ca);
        }
        if get("GRPC_CLIENT_TLS_SAN").is_some() {
            return Err(CompatError::ClientSan);
        }
    }

    // Answers.
    t.switch("shadow-mode", flag_bool("SHADOW_MODE")?);
    t.switch(
        "response-headers",
        flag_bool("LIMIT_RESPONSE_HEADERS_ENABLED")?,
    );
    for (var, flag) in [
        ("LIMIT_LIMIT_HEADER", "header-limit"),
        ("LIMIT_REMAINING_HEADER", "header-remaining"),
        ("LIMIT_RESET_HEADER", "header-reset"),
    ] {
        if let Some(name) = get(var) {
            t.flag(flag, &name);
        }
    }
    t.switch("dynamic-metadata", flag_bool("RESPONSE_DYNAMIC_METADATA")?);
    t.switch("disabled", flag_bool("RATE_LIMIT_DISABLED")?);
    if flag_bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")? == Some(false) {
        t.notes.push(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: tollgate never charges a request it \
             denies (set TOLLGATE_COUNT_REJECTED=true to charge them)"
                .into(),
        );
    }
    // Expiry jitter spreads envoyproxy/ratelimit's key expiries; tollgate's keys expire at
    // their window's end plus one second and need none.
    if let Some(j) = get("EXPIRATION_JITTER_MAX_SECONDS") {
        j.parse::<u64>()
            .map_err(|_| CompatError::Jitter(j.clone()))?;
    }

    // The store.
    let backend = get("BACKEND_TYPE").unwrap_or_else(|| "redis".into());
    if backend != "redis" {
        return Err(CompatError::Backend(backend));
    }
    if flag_bool("REDIS_PERSECOND")?.unwrap_or(false) {
        return Err(CompatError::PerSecond);
    }
    if env("TOLLGATE_REDIS_URL").is_none() {
        t.flag("redis-url", &redis_url(&get)?);
    }
    if let Some(timeout) = get("REDIS_TIMEOUT") {
        // envoyproxy/ratelimit's dial and I/O timeout: tollgate's connection timeout, never
        // the per-decision deadline (--redis-timeout).
        t.flag("redis-connect-timeout", &timeout);
    }
    for (var, flag) in [
        ("REDIS_TLS_CACERT", "redis-ca-file"),
        ("REDIS_TLS_CLIENT_CERT", "redis-client-cert"),
        ("REDIS_TLS_CLIENT_KEY", "redis-client-key"),
    ] {
        if let Some(path) = get(var) {
            t.flag(flag, &path);
        }
    }
    if let Some(prefix) = get("CACHE_KEY_PREFIX") {
        t.flag("redis-key-prefix", &prefix);
    }
    if let Some(bytes) = get("LOCAL_CACHE_SIZE_IN_BYTES") {
        let bytes: u64 = bytes
            .parse()
            .map_err(|_| CompatError::CacheSize(bytes.clone()))?;
        // tollgate's over-limit cache counts entries; one holds about 128 bytes.
        t.flag("local-cache-size", &(bytes / 128).to_string());
    }

    tracing::translate(&mut t, &get, &flag_bool)?;
    stats::translate(&mut t, &get, &flag_bool, use_prometheus)?;
    let unused: Vec<&str> = NOT_IMPLEMENTED
        .iter()
        .copied()
        .filter(|v| env(v).is_some())
        .collect();
    if !unused.is_empty() {
        t.notes.push(format!(
            "envoyproxy/ratelimit variables tollgate does not implement (ignored): {}",
            unused.join(", ")
        ));
    }
    Ok(Translation {
        args: t.args,
        notes: t.notes,
    })
}

/// `CONFIG_TYPE=FILE`: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, every file in it.
fn runtime_directory(t: &mut Builder, get: &Get, flag_bool: &GetBool) -> Result<(), CompatError> {
    let root = get("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into());
    let mut dir = std::path::PathBuf::from(root);
    if let Some(sub) = get("RUNTIME_SUBDIRECTORY") {
        dir.push(sub);
    }
    dir.push(get("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into()));
    t.flag("config", &dir.display().to_string());
    let ignore_dotfiles = flag_bool("RUNTIME_IGNOREDOTFILES")?.unwrap_or(false);
    t.flag(
        "config-files",
        if ignore_dotfiles {
            "all"
        } else {
            "all-with-dotfiles"
        },
    );
    // RUNTIME_WATCH_ROOT chooses what envoyproxy/ratelimit's watcher follows (a symlink swap
    // of the root, or the directory); tollgate re-reads the directory either way.
    flag_bool("RUNTIME_WATCH_ROOT")?;
    Ok(())
}

/// `REDIS_SOCKET_TYPE`, `REDIS_TYPE`, `REDIS_URL`, `REDIS_AUTH`, `REDIS_SENTINEL_AUTH` and
/// `REDIS_TLS` as one tollgate Redis URL.
fn redis_url(get: &dyn Fn(&str) -> Option<String>) -> Result<String, CompatError> {
    let url = get("REDIS_URL").ok_or(CompatError::NoRedisUrl)?;
    let tls = match get("REDIS_TLS") {
        Some(v) => go_bool("REDIS_TLS", &v)?,
        None => false,
    };
    let auth = match get("REDIS_AUTH") {
        None => String::new(),
        Some(a) => match a.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", escape(user), escape(pass)),
            None => format!(":{}@", escape(&a)),
        },
    };
    let socket = get("REDIS_SOCKET_TYPE").unwrap_or_else(|| "tcp".into());
    let kind = get("REDIS_TYPE")
        .unwrap_or_else(|| "single".into())
        .to_ascii_lowercase();
    match socket.as_str() {
        "unix" => {
            if kind != "single" {
                return Err(CompatError::UnixNotSingle(kind));
            }
            let host = if auth.is_empty() { "" } else { "localhost" };
            return Ok(format!("redis+unix://{auth}{host}{url}"));
        }
        "tcp" => {}
        other => return Err(CompatError::SocketType(other.to_string())),
    }
    let s = if tls { "s" } else { "" };
    let hosts = |list: &str| -> Vec<String> {
        list.split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect()
    };
    Ok(match kind.as_str() {
        "single" => format!("redis{s}://{auth}{url}"),
        "cluster" => format!("redis{s}-cluster://{auth}{}", hosts(&url).join(",")),
        "sentinel" => {
            // envoyproxy/ratelimit: "master-name,sentinel1:port,sentinel2:port".
            let mut parts = hosts(&url).into_iter();
            let master = parts.next().unwrap_or_default();
            let sentinels: Vec<String> = parts.collect();
            if sentinels.is_empty() {
                return Err(CompatError::SentinelUrl(url));
            }
            let query = match get("REDIS_SENTINEL_AUTH") {
                None => String::new(),
                Some(a) => match a.split_once(':') {
                    Some((user, pass)) => format!(
                        "?sentinelUsername={}&sentinelPassword={}",
                        escape(user),
                        escape(pass)
                    ),
                    None => format!("?sentinelPassword={}", escape(&a)),
                },
            };
            format!(
                "redis{s}-sentinel://{auth}{}/{master}{query}",
                sentinels.join(",")
            )
        }
        other => return Err(CompatError::RedisType(other.to_string())),
    })
}

/// Percent-encodes everything but unreserved characters (for URL user info and queries).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's `strconv.ParseBool`.
pub fn go_bool(name: &str, value: &str) -> Result<bool, CompatError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(CompatError::Bool {
            name: name.to_string(),
            value: value.to_string(),
        }),
    }
}

/// logrus level names as a tracing filter.
fn log_level(level: &str) -> Result<String, CompatError> {
    Ok(match level.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        _ => return Err(CompatError::LogLevel(level.to_string())),
    }
    .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(vars: &[(&str, &str)]) -> Result<Vec<String>, CompatError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let t = translate("ratelimit".into(), &|k| map.get(k).cloned())?;
        Ok(t.args
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect())
    }

    #[test]
    fn istio_sample_environment() {
        let args = run(&[
            ("LOG_LEVEL", "debug"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("USE_STATSD", "false"),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("HOST", "::"),
            ("GRPC_HOST", "::"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "ratelimit",
                "--log=debug",
                "serve",
                "--config=/data/ratelimit/config",
                "--config-files=all",
                "--http-addr=[::]:8080",
                "--grpc-addr=[::]:8081",
                "--debug-addr=[::]:6070",
                "--redis-url=redis://redis:6379",
            ]
        );
    }

    #[test]
    fn redis_forms() {
        let url = |vars: &[(&str, &str)]| {
            run(vars).map(|a| {
                a.into_iter()
                    .find_map(|x| x.strip_prefix("--redis-url=").map(str::to_string))
                    .unwrap()
            })
        };
        assert_eq!(
            url(&[("REDIS_URL", "h:1"), ("REDIS_AUTH", "p@ss")]).unwrap(),
            "redis://:p%40ss@h:1"
        );
        assert_eq!(
            url(&[
                ("REDIS_URL", "h:1"),
                ("REDIS_AUTH", "u:p"),
                ("REDIS_TLS", "T")
            ])
            .unwrap(),
            "rediss://u:p@h:1"
        );
        assert_eq!(
            url(&[("REDIS_URL", "a:1, b:2"), ("REDIS_TYPE", "cluster")]).unwrap(),
            "redis-cluster://a:1,b:2"
        );
        assert_eq!(
            url(&[
                ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_SENTINEL_AUTH", "sp")
            ])
            .unwrap(),
            "redis-sentinel://s1:26379,s2:26379/mymaster?sentinelPassword=sp"
        );
        assert_eq!(
            url(&[
                ("REDIS_URL", "/run/redis.sock"),
                ("REDIS_SOCKET_TYPE", "unix")
            ])
            .unwrap(),
            "redis+unix:///run/redis.sock"
        );
        assert_eq!(run(&[]), Err(CompatError::NoRedisUrl));
        assert!(run(&[("REDIS_URL", "h:1"), ("REDIS_TYPE", "weird")]).is_err());
        assert!(run(&[("REDIS_URL", "mymaster"), ("REDIS_TYPE", "sentinel")]).is_err());
    }

    #[test]
    fn tollgate_variables_win_and_go_syntax_is_checked() {
        let args = run(&[
            ("REDIS_URL", "h:1"),
            ("TOLLGATE_REDIS_URL", "redis://other:2"),
            ("TOLLGATE_CONFIG", "/etc/tollgate"),
            ("SHADOW_MODE", "1"),
            ("GRPC_MAX_CONNECTION_AGE", "1h30m"),
        ])
        .unwrap();
        assert!(!args.iter().any(|a| a.starts_with("--redis-url")));
        assert!(!args.iter().any(|a| a.starts_with("--config=")));
        assert!(args.contains(&"--shadow-mode".to_string()));
        assert!(args.contains(&"--grpc-max-connection-age=1h30m".to_string()));
        let err = run(&[("REDIS_URL", "h:1"), ("SHADOW_MODE", "yes")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("SHADOW_MODE=yes"), "{err}");
        assert!(run(&[("REDIS_URL", "h:1"), ("BACKEND_TYPE", "memcache")]).is_err());
        assert!(run(&[("REDIS_URL", "h:1"), ("REDIS_PERSECOND", "true")]).is_err());
        assert!(run(&[
            ("REDIS_URL", "h:1"),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "c")
        ])
        .unwrap_err()
        .to_string()
        .contains("GRPC_SERVER_TLS_KEY"));
        assert!(invoked_as_ratelimit("/bin/ratelimit".as_ref()));
        assert!(!invoked_as_ratelimit("/usr/local/bin/tollgate".as_ref()));
    }
}
