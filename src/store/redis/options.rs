//! What a Redis store is built from: the URL and connection options, where its clock comes
//! from, and the format its keys carry.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::base::clock::Clock;
use crate::telemetry::metrics::Metrics;

/// The format of keys and stored state; part of every key, so a tollgate that changes the
/// format never reads another format's state (during a rolling upgrade both count apart).
pub const KEY_FORMAT: &str = "v3:";

/// How long a decision whose caller has gone keeps waiting for Redis's late replies, to take
/// back what they charged.
pub const LATE_REPLY: Duration = Duration::from_secs(5);

/// Where "now" comes from for the scripts.
#[derive(Clone)]
pub enum ClockSource {
    /// Redis `TIME` inside the script: every replica of tollgate agrees.
    Redis,
    /// This instance's clock (or a test's), passed to the script.
    Local(Arc<dyn Clock>),
}

#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://`, `rediss://`, `redis-cluster://h:p[,h:p…]`, `redis-sentinel://h:p[,h:p…]/service`.
    pub url: String,
    /// Overrides any password in the URL.
    pub password: Option<String>,
    /// Prepended to every key (outside the hash tag).
    pub key_prefix: String,
    /// Deadline for one decision's Redis work.
    pub timeout: Duration,
    /// How long opening one connection (TCP, TLS, AUTH) may take.
    pub connect_timeout: Duration,
    pub clock: ClockSource,
    /// Entries in the local over-limit cache; 0 disables it.
    pub local_cache_size: usize,
    /// Where the store counts (round trips, refunds, cache hits).
    pub metrics: Arc<Metrics>,
    /// TLS: trust this CA (PEM) instead of the system's roots (`rediss://` URLs).
    pub ca_file: Option<PathBuf>,
    /// TLS: present this client certificate and key (PEM) for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Redis Cluster: answer requests that charge nothing (every cost 0) from replicas.
    pub read_replicas: bool,
    /// `--redis-wait-replicas`: a call that charges is answered only once this many replicas
    /// acknowledged it (Redis `WAIT` after the script, on its connection); 0 = off.
    pub wait_replicas: u32,
}
