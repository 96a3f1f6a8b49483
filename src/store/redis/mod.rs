//! The Redis store: single node, Sentinel or Redis Cluster, through `fred`.
//!
//! A request follows the decision [`protocol`](crate::store::protocol) over its
//! [`placement`](crate::store::placement) groups. On one node a request is one group; on a
//! cluster every key of a group lives in one hash slot. Either way one `EVALSHA` of
//! The decision script (`lua/decide/`, joined by build.rs) decides and charges a group atomically ([`script`]). On a cluster,
//! descriptor groups run concurrently (one round trip for all of them), shared limits after
//! them, and a group that charged for a request that ends up denied takes its charges back
//! exactly. That can briefly under-admit, never over-admit.
//!
//! By concern, one folder each: reaching Redis ([`connection`]: URLs, TLS, the fred clients,
//! readiness and topology, the empty-Redis marker, migrating hash slots); the scripts Redis
//! runs ([`scripts`]: the decision script's arguments and replies, deciding a request with its
//! refunds and deadline, coalescing calls into one `EVALSHA`, replica reads, the operator's
//! reads and resets); `--redis-wait-replicas` ([`durability`]); what this instance keeps
//! between calls ([`local`]: leased units, the over-limit cache); one limit across regions
//! ([`regional`]). Here: the [`Store`] impl; its options ([`options`]), what its parts share
//! ([`inner`]) and fred's errors ([`error`]).

pub mod connection;
pub mod durability;
pub mod error;
mod inner;
pub mod local;
pub mod options;
pub mod regional;
pub mod scripts;

use std::future::Future;
use std::sync::Arc;

use self::connection::client::Clients;
use self::connection::health::Health;
use self::connection::migration::Migrations;
use self::error::ConnectError;
use self::inner::Inner;
use self::local::lease::Leases;
use self::local::local_cache::LocalCache;
use self::options::{ClockSource, RedisOptions, KEY_FORMAT};
use self::scripts::script::Script;
use super::{CounterReading, Store, Taken};
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::base::clock::Clock;
use crate::plan::Plan;
use crate::store::error::StoreError;

pub struct RedisStore {
    inner: Arc<Inner>,
}

impl Store for RedisStore {
    async fn apply(&self, plan: &Plan<'_>, mode: Mode) -> Result<Vec<ChargeOutcome>, StoreError> {
        Ok(self.inner.apply(plan, mode, false).await?.0)
    }

    async fn apply_taking(
        &self,
        plan: &Plan<'_>,
        mode: Mode,
    ) -> Result<(Vec<ChargeOutcome>, Taken), StoreError> {
        let (outcomes, taken) = self.inner.apply(plan, mode, true).await?;
        Ok((outcomes, taken.unwrap_or_else(|| Taken::nothing(mode))))
    }

    async fn give_back(&self, taken: Taken) {
        self.inner.give_back(taken).await;
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

    fn leases(&self) -> Vec<super::LeaseReport> {
        match self.inner.regional.get() {
            Some(r) => r.board.reports(&r.region),
            None => Vec::new(),
        }
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
                health: Health::new(
                    opts.metrics.clone(),
                    opts.read_replicas,
                    opts.wait_replicas,
                    opts.key_prefix.clone(),
                ),
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
                regional: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Refuses a `--redis-wait-replicas` that no decision could meet (a primary with fewer
    /// replicas than that at all), once Redis answers within `within`. `Ok` when it is met, off,
    /// or Redis did not answer in time (upkeep checks again when it does, and logs an error).
    /// Gives this instance a region (`--region`): global limits are then spent from the
    /// region's lease. Once; before serving.
    pub fn with_region(
        &self,
        opts: regional::RegionOptions,
    ) -> Result<(), regional::error::RegionalError> {
        let inner = &self.inner;
        let r = regional::inner::Regional::new(opts, &inner.opts, inner.clients.main().clone())?;
        inner
            .regional
            .set(Arc::new(r))
            .map_err(|_| regional::error::RegionalError::AlreadySet)
    }

    /// This instance's part in global limits, when it has a region.
    pub fn regional(&self) -> Option<Arc<regional::inner::Regional>> {
        self.inner.regional.get().cloned()
    }

    pub async fn check_wait_replicas(
        &self,
        within: std::time::Duration,
    ) -> Result<(), durability::replication::TooFewReplicas> {
        let inner = &self.inner;
        if inner.opts.wait_replicas == 0 {
            return Ok(());
        }
        use fred::interfaces::ClientLike;
        let main = inner.clients.main();
        if tokio::time::timeout(within, main.wait_for_connect())
            .await
            .map_or(true, |r| r.is_err())
        {
            return Ok(());
        }
        durability::replication::check(&inner.clients, inner.opts.wait_replicas).await
    }
}
