//! envoyproxy/ratelimit's store variables as flags: `BACKEND_TYPE`, the Redis URL from
//! `REDIS_SOCKET_TYPE`, `REDIS_TYPE`, `REDIS_URL`, `REDIS_AUTH`, `REDIS_SENTINEL_AUTH` and
//! `REDIS_TLS`, its timeouts, TLS files, key prefix and the local cache's size.

use super::args::{go_bool, Builder, Get, GetBool};
use super::error::CompatError;

pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
) -> Result<(), CompatError> {
    // The store.
    let backend = get("BACKEND_TYPE").unwrap_or_else(|| "redis".into());
    if backend != "redis" {
        return Err(CompatError::Backend(backend));
    }
    if flag_bool("REDIS_PERSECOND")?.unwrap_or(false) {
        return Err(CompatError::PerSecond);
    }
    if (t.env)("TOLLGATE_REDIS_URL").is_none() {
        t.flag("redis-url", &redis_url(get)?);
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
