//! fred's errors as [`StoreError`]s: which cause a Redis failure is (timeout, connection
//! refused / reset / TLS / authentication / DNS, a script error, not run), named once here for
//! readiness, the failure policy's log line, the metric and the trace span alike; and why a
//! Redis store cannot be set up from its options ([`ConnectError`]).

use fred::prelude::{Error, ErrorKind, Server};

use crate::base::pem::PemError;
use crate::store::error::StoreError;
use crate::store::error::{Cause, Connection};

/// Options that cannot make a Redis store: the URL, TLS files, or a flag that needs another.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL does not parse (the message never quotes a password).
    #[error(transparent)]
    BadUrl(#[from] super::connection::url::UrlError),
    /// fred refused the cluster discovery policy; only the kind of its error is kept (its
    /// message may quote the URL).
    #[error("redis cluster discovery: {0:?}")]
    ClusterDiscovery(fred::error::ErrorKind),
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("{}: not a usable CA certificate: {why}", path.display())]
    Ca {
        path: std::path::PathBuf,
        why: String,
    },
    #[error("{}: unusable client certificate: {why}", path.display())]
    ClientCert {
        path: std::path::PathBuf,
        why: String,
    },
    #[error("TLS: {0}")]
    Tls(String),
    /// A flag that needs another (`--read-replicas` without a cluster URL, …).
    #[error("{0}")]
    Flags(&'static str),
}

/// Where an error happened that has no node of its own; [`super::connection::client::Clients::explain`]
/// puts the URL's host there.
pub const SOMEWHERE: &str = "redis";

/// `e` on `server` (or, when fred names none, `host`).
pub fn classify(e: &Error, server: Option<&Server>, host: &str) -> StoreError {
    let place = match server {
        Some(s) => format!("redis {}:{}", s.host, s.port),
        None if host == SOMEWHERE => SOMEWHERE.to_string(),
        None => format!("redis {host}"),
    };
    StoreError::new(place, cause(e)).with_source(e.clone())
}

fn cause(e: &Error) -> Cause {
    let details = e.details().to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| details.contains(w));
    let connection = |c| Cause::Connection(c);
    match e.kind() {
        _ if has(&["connection refused"]) => connection(Connection::Refused),
        _ if has(&["lookup", "name or service not known"]) => connection(Connection::Dns),
        _ if has(&["wrongpass", "noauth", "invalid username-password"]) => {
            connection(Connection::Auth)
        }
        ErrorKind::Auth => connection(Connection::Auth),
        ErrorKind::Tls => connection(Connection::Tls(e.details().to_string())),
        _ if has(&["certificate", "tls"]) => connection(Connection::Tls(e.details().to_string())),
        ErrorKind::Timeout => Cause::Timeout(None),
        _ if has(&["timed out", "timeout"]) => Cause::Timeout(None),
        _ if has(&["clusterdown", "tryagain", "moved ", "ask "]) => {
            Cause::NotRun(e.details().to_string())
        }
        _ if has(&["connection reset", "broken pipe", "closed", "eof"]) => {
            connection(Connection::Reset)
        }
        ErrorKind::IO => connection(Connection::Other(e.details().to_string())),
        ErrorKind::Routing | ErrorKind::Cluster | ErrorKind::Backpressure | ErrorKind::Canceled => {
            Cause::NotRun(e.details().to_string())
        }
        _ => Cause::Script(e.details().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_is_named() {
        let cases = [
            (
                ErrorKind::IO,
                "Connection refused (os error 111)",
                "connection refused",
            ),
            (
                ErrorKind::IO,
                "Connection closed unexpectedly",
                "connection closed or reset",
            ),
            (
                ErrorKind::Auth,
                "WRONGPASS invalid username-password pair",
                "authentication failed",
            ),
            (ErrorKind::Timeout, "Request timed out.", "timed out"),
            (
                ErrorKind::Unknown,
                "CLUSTERDOWN The cluster is down",
                "not run: CLUSTERDOWN The cluster is down",
            ),
            (
                ErrorKind::Unknown,
                "ERR Error running script",
                "script failed: ERR Error running script",
            ),
            (
                ErrorKind::IO,
                "failed to lookup address information",
                "DNS lookup failed",
            ),
        ];
        for (kind, details, want) in cases {
            let e = classify(&Error::new(kind, details), None, "127.0.0.1:6390");
            assert_eq!(
                e.to_string(),
                format!("redis 127.0.0.1:6390: {want}"),
                "{details}"
            );
        }
    }
}
