//! tollgate's Redis URL forms, turned into fred's configuration.
//!
//! `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS), `redis-cluster://h:p[,h:p…]`,
//! `redis-sentinel://h:p[,h:p…]/service[/db][?sentinelUsername=u&sentinelPassword=p]` and
//! `redis+unix:///path/to/redis.sock`. Errors never quote the password.

use fred::prelude::{Config, ErrorKind};

/// A Redis URL tollgate cannot use. No variant holds the URL or fred's error, whose message
/// may quote it: the password never leaves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error(
        "redis URL must start with redis://, rediss://, redis-cluster://, redis-sentinel:// or redis+unix://"
    )]
    NoScheme,
    #[error("unsupported redis URL scheme '{0}'")]
    Scheme(String),
    #[error("only redis-sentinel:// URLs take a ?query")]
    Query,
    #[error("redis URL names no host")]
    NoHost,
    #[error(
        "redis-sentinel:// URL needs the service name: redis-sentinel://host:port[,host:port]/service[/db]"
    )]
    NoService,
    /// fred refused the URL; only the kind of its error is kept.
    #[error("invalid redis URL ({0:?})")]
    Invalid(ErrorKind),
}

/// Turns tollgate's URL forms into fred's.
pub fn fred_config(url: &str) -> Result<Config, UrlError> {
    let (scheme, rest) = url.split_once("://").ok_or(UrlError::NoScheme)?;
    let invalid = |e: fred::error::Error| UrlError::Invalid(e.kind().clone());
    if scheme == "redis+unix" {
        return Config::from_url_unix(url).map_err(invalid);
    }
    // Only sentinel URLs take a query (the sentinels' own credentials).
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) if scheme.ends_with("-sentinel") => (r, Some(q)),
        Some(_) => return Err(UrlError::Query),
        None => (rest, None),
    };
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (format!("{a}@"), r),
        None => (String::new(), rest),
    };
    let (hosts, path) = match rest.split_once('/') {
        Some((h, p)) => (h, p),
        None => (rest, ""),
    };
    let mut hosts = hosts.split(',').filter(|h| !h.is_empty());
    let first = hosts.next().ok_or(UrlError::NoHost)?;
    let others: Vec<String> = hosts.map(|h| format!("node={h}")).collect();
    let fred_url = match scheme {
        "redis" | "rediss" => format!("{scheme}://{auth}{first}/{path}"),
        "redis-cluster" | "rediss-cluster" => {
            let q = if others.is_empty() {
                String::new()
            } else {
                format!("?{}", others.join("&"))
            };
            format!("{scheme}://{auth}{first}{q}")
        }
        "redis-sentinel" | "rediss-sentinel" => {
            let (service, db) = match path.split_once('/') {
                Some((s, d)) => (s, d),
                None => (path, ""),
            };
            if service.is_empty() {
                return Err(UrlError::NoService);
            }
            let mut q = vec![format!("sentinelServiceName={service}")];
            q.extend(others);
            q.extend(query.map(str::to_string));
            format!("{scheme}://{auth}{first}/{db}?{}", q.join("&"))
        }
        other => return Err(UrlError::Scheme(other.to_string())),
    };
    // fred's messages may quote the URL; ours never carries the password out.
    Config::from_url(&fred_url).map_err(invalid)
}

/// The URL's first host (`host:port`), for messages: never the user or password.
pub fn first_host(url: &str) -> String {
    if let Some(path) = url.strip_prefix("redis+unix://") {
        return path.rsplit_once('@').map_or(path, |(_, p)| p).to_string();
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hosts = rest.split('/').next().unwrap_or(rest);
    hosts.split(',').next().unwrap_or(hosts).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_translate() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://user:secret@127.0.0.1:6379/2",
            "redis-cluster://127.0.0.1:7000",
            "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
            "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
            "rediss://127.0.0.1:6380",
            "redis+unix:///tmp/redis.sock",
            "redis-sentinel://127.0.0.1:26379/mymaster?sentinelPassword=s3cret",
        ] {
            assert!(fred_config(url).is_ok(), "{url}");
        }
        assert!(fred_config("redis-cluster://127.0.0.1:7000,127.0.0.1:7001")
            .unwrap()
            .server
            .is_clustered());
        for bad in [
            "127.0.0.1:6379",
            "http://x:1",
            "redis-sentinel://h:1",
            "redis://",
            "redis://h:1?x=y",
        ] {
            assert!(fred_config(bad).is_err(), "{bad}");
        }
        let err = fred_config("bogus://user:hunter2@h:1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
        assert_eq!(first_host("redis://user:hunter2@h:1/2"), "h:1");
        assert_eq!(first_host("redis-cluster://a:1,b:2"), "a:1");
    }
}
