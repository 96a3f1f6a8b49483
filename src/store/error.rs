//! Why a store could not decide, as a type: the failure policy, the log line, `/readyz`, the
//! `tollgate_store_failures` metric (label `cause`) and the trace span all name the same cause,
//! and the error keeps what it came from.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A store failure: where, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{place}: {cause}")]
pub struct StoreError {
    /// Where it failed: `redis 127.0.0.1:6379` (a node, or the URL's first host), or a store's
    /// name.
    pub place: String,
    pub cause: Cause,
    #[source]
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// Why a store failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// No answer in time (`Some`: the decision's deadline).
    Timeout(Option<Duration>),
    /// The connection failed.
    Connection(Connection),
    /// The store ran the call and it failed, or answered something unreadable.
    Script(String),
    /// Refused before running (a slot migrating or a cluster failing over, past its retries; a
    /// call never sent): nothing of it ran.
    NotRun(String),
    /// Fewer replicas than `--redis-wait-replicas` (`wanted`) hold it: `Some(n)`, it ran and
    /// `n` acknowledged it in time (a failover may lose it); `None`, its primary had fewer
    /// connected and it was not sent.
    NotReplicated { acked: Option<u32>, wanted: u32 },
}

/// How a connection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    Refused,
    /// Closed or reset while in use.
    Reset,
    Tls(String),
    Auth,
    Dns,
    Other(String),
}

impl Cause {
    /// The metric's and span's name for the cause: one of
    /// [`FAILURE_CAUSES`](crate::telemetry::counted::FAILURE_CAUSES).
    pub fn kind(&self) -> &'static str {
        match self {
            Cause::Timeout(_) => "timeout",
            Cause::Connection(Connection::Refused) => "refused",
            Cause::Connection(Connection::Reset) => "reset",
            Cause::Connection(Connection::Tls(_)) => "tls",
            Cause::Connection(Connection::Auth) => "auth",
            Cause::Connection(Connection::Dns) => "dns",
            Cause::Connection(Connection::Other(_)) => "io",
            Cause::Script(_) => "script",
            Cause::NotRun(_) => "not_run",
            Cause::NotReplicated { .. } => "not_replicated",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Timeout(None) => write!(f, "timed out"),
            Cause::Timeout(Some(d)) => write!(f, "did not answer within {d:?}"),
            Cause::Connection(c) => write!(f, "{c}"),
            Cause::Script(why) => write!(f, "script failed: {why}"),
            Cause::NotRun(why) => write!(f, "not run: {why}"),
            Cause::NotReplicated {
                acked: Some(acked),
                wanted,
            } => write!(
                f,
                "not replicated: {acked} of {wanted} replicas acknowledged in time"
            ),
            Cause::NotReplicated {
                acked: None,
                wanted,
            } => write!(
                f,
                "not replicated: fewer than {wanted} replicas connected (not sent)"
            ),
        }
    }
}

impl fmt::Display for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Connection::Refused => write!(f, "connection refused"),
            Connection::Reset => write!(f, "connection closed or reset"),
            Connection::Tls(why) => write!(f, "TLS failed: {why}"),
            Connection::Auth => write!(f, "authentication failed"),
            Connection::Dns => write!(f, "DNS lookup failed"),
            Connection::Other(why) => write!(f, "connection failed: {why}"),
        }
    }
}

impl StoreError {
    pub fn new(place: impl Into<String>, cause: Cause) -> StoreError {
        StoreError {
            place: place.into(),
            cause,
            source: None,
        }
    }

    /// A store that does not do `what` (an operator's read or reset), asked to.
    pub fn unsupported(place: &str, what: &str) -> StoreError {
        StoreError::new(
            place,
            Cause::NotRun(format!("this store does not support {what}")),
        )
    }

    /// Keeps `source` as the error this one came from.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same failure, placed at `place`.
    pub fn at(mut self, place: impl Into<String>) -> Self {
        self.place = place.into();
        self
    }

    /// A failure of the connection (any kind).
    pub fn is_connection(&self) -> bool {
        matches!(self.cause, Cause::Connection(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_place_and_the_cause() {
        let e = StoreError::new(
            "redis 127.0.0.1:6390",
            Cause::Connection(Connection::Refused),
        );
        assert_eq!(e.to_string(), "redis 127.0.0.1:6390: connection refused");
        assert_eq!(e.cause.kind(), "refused");
        let e = StoreError::new(
            "redis 127.0.0.1:6390",
            Cause::Timeout(Some(Duration::from_millis(10))),
        );
        assert_eq!(
            e.to_string(),
            "redis 127.0.0.1:6390: did not answer within 10ms"
        );
        assert_eq!(e.cause.kind(), "timeout");
    }

    #[test]
    fn every_cause_has_a_series_of_the_metric() {
        use crate::telemetry::counted::FAILURE_CAUSES;
        let causes = [
            Cause::Timeout(None),
            Cause::Connection(Connection::Refused),
            Cause::Connection(Connection::Reset),
            Cause::Connection(Connection::Tls("x".into())),
            Cause::Connection(Connection::Auth),
            Cause::Connection(Connection::Dns),
            Cause::Connection(Connection::Other("x".into())),
            Cause::Script("x".into()),
            Cause::NotRun("x".into()),
            Cause::NotReplicated {
                acked: Some(0),
                wanted: 1,
            },
        ];
        let kinds: Vec<&str> = causes.iter().map(Cause::kind).collect();
        assert_eq!(kinds, FAILURE_CAUSES);
    }
}
