//! envoyproxy/ratelimit's interface: when the binary is invoked as `ratelimit` (the image's
//! `/bin/ratelimit`, as Istio's and other manifests run it) it takes no arguments and reads
//! envoyproxy/ratelimit's environment variables instead.
//!
//! Each variable becomes the `serve` flag that does the same thing, so there is one code
//! path and `serve --help` documents it. A `TOLLGATE_*` variable that is also set wins (its
//! flag is not generated). Variables tollgate does not implement are named once at startup;
//! ones whose silent omission would change answers or security are errors.

mod answers;
mod args;
pub mod error;
mod listeners;
mod source;
mod stats;
mod store;
mod tracing;
mod xds;

use std::ffi::OsString;

use self::args::{go_bool, Builder, Get};
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

/// Translates the environment `env` into `tollgate serve …` arguments (`argv0` first), one
/// part of envoyproxy/ratelimit's settings after the other.
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
    logs(&mut t, &get)?;
    t.args.push("serve".into());
    source::translate(&mut t, &get, &flag_bool)?;
    let use_prometheus = listeners::translate(&mut t, &get, &flag_bool)?;
    answers::translate(&mut t, &get, &flag_bool)?;
    store::translate(&mut t, &get, &flag_bool)?;
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

/// `LOG_LEVEL` and `LOG_FORMAT`.
fn logs(t: &mut Builder, get: &Get) -> Result<(), CompatError> {
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
    Ok(())
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
