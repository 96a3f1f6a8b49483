//! The Redis store: single node, Sentinel or Redis Cluster, through `fred`.
//!
//! A request follows the decision [`protocol`](crate::store::protocol) over its
//! [`placement`](crate::store::placement) groups. On one node a request is one group; on a
//! cluster every key of a group lives in one slot. Either way one `EVALSHA` of
//! `lua/tollgate.lua` decides and charges a group atomically ([`script`]). On a cluster,
//! descriptor groups run concurrently (one round trip for all of them), shared limits after
//! them, and a group that charged for a request that ends up denied takes its charges back
//! exactly. That can briefly under-admit, never over-admit.
//!
//! One idea per file: the options and the [`Store`] impl here; the fred clients, one per
//! serving thread ([`client`]); deciding a request, refunds and the caller's deadline
//! ([`decide`]); sending scripts, many calls' in one `EVALSHA` ([`batch`]); the script's
//! arguments and replies ([`script`]); leased shared limits ([`lease`]); replica reads
//! ([`replicas`]); readiness, topology and script loading ([`health`]); a slot being migrated
//! ([`migration`]); the over-limit cache that lets an exhausted key skip Redis
//! ([`local_cache`]); URLs ([`url`]) and TLS ([`tls`]).

mod admin;
mod client;
mod coalesce;
mod decide;
mod error;
mod health;
mod lease;
mod local_cache;
mod migration;
mod replicas;
pub mod script;
mod tls;
mod url;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use self::client::Clients;
pub use self::error::ConnectError;
use self::health::Health;
use self::lease::Leases;
#[doc(hidden)] // For benches/local_cache.rs; not part of the API.
pub use self::local_cache::LocalCache;
use self::migration::Migrations;
use self::script::Script;
pub use self::url::UrlError;
use super::{ChargeOutcome, CounterReading, Store, StoreError};
use crate::algorithm::Mode;
use crate::base::clock::Clock;
use crate::plan::Plan;
use crate::telemetry::metrics::Metrics;

/// The format of keys and stored state; part of every key, so a tollgate that changes the
/// format never reads another format's state (during a rolling upgrade both count apart).
pub const KEY_FORMAT: &str = "v3:";

/// How long a decision whose caller has gone keeps waiting for Redis's late replies, to take
/// back what they charged.
pub(super) const LATE_REPLY: Duration = Duration::from_secs(5);

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
}

pub struct RedisStore {
    inner: Arc<Inner>,
}

/// What every part of the store shares.
struct Inner {
    clients: Clients,
    health: Health,
    script: Script,
    /// `lua/admin.lua`: the operator's reads and resets.
    admin_script: Script,
    opts: RedisOptions,
    /// `key_prefix` + [`KEY_FORMAT`].
    prefix: String,
    cache: LocalCache,
    /// Units of leased shared limits this instance holds ([`lease`]).
    leases: Leases,
    /// Slots seen migrating between primaries, and where each is imported.
    migrations: Migrations,
    /// The instance clock, for the local cache.
    wall: Arc<dyn Clock>,
}

impl Store for RedisStore {
    async fn apply(&self, plan: &Plan<'_>, mode: Mode) -> Result<Vec<ChargeOutcome>, StoreError> {
        self.inner.apply(plan, mode).await
    }

    async fn read(&self, plan: &Plan<'_>) -> Result<Vec<CounterReading>, StoreError> {
        self.inner.read(plan).await
    }

    async fn reset(&self, plan: &Plan<'_>) -> Result<Vec<CounterReading>, StoreError> {
        self.inner.reset(plan).await
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn is_ready(&self) -> bool {
        self.inner.health.is_ready()
    }

    fn reason(&self) -> Option<StoreError> {
        self.inner.health.reason()
    }

    fn warning(&self) -> Option<String> {
        self.inner.health.warning()
    }

    async fn maintain(&self) {
        let inner = &self.inner;
        inner.health.upkeep(&inner.clients, &inner.script).await;
        inner.cache.sweep(inner.wall.now_us());
        inner.leases.forget_lapsed(inner.leases.now());
    }

    async fn close(&self) {
        self.inner.refund_leases().await;
    }

    async fn serve_thread<F: Future>(&self, serve: F) -> F::Output {
        self.inner.clients.serve_thread(serve).await
    }
}

impl RedisStore {
    /// Creates the clients and starts connecting in the background: the store is not ready
    /// until Redis answers, and keeps retrying with backoff while it does not.
    pub fn connect(opts: RedisOptions, wall: Arc<dyn Clock>) -> Result<RedisStore, ConnectError> {
        let clients = Clients::connect(&opts)?;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                clients,
                health: Health::new(opts.metrics.clone(), opts.read_replicas),
                script: Script::tollgate(),
                admin_script: Script::admin(),
                cache: LocalCache::new(opts.local_cache_size),
                leases: Leases::new(match &opts.clock {
                    ClockSource::Local(c) => Some(c.clone()),
                    ClockSource::Redis => None,
                }),
                migrations: Migrations::default(),
                prefix: format!("{}{KEY_FORMAT}", opts.key_prefix),
                opts,
                wall,
            }),
        })
    }
}

impl Inner {
    /// The script's `now` argument: `None` when the script reads Redis `TIME`.
    fn now_arg(&self) -> Option<i64> {
        match &self.opts.clock {
            ClockSource::Redis => None,
            ClockSource::Local(c) => Some(c.now_us() as i64),
        }
    }
}
