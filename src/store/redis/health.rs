//! Keeping the Redis store healthy: readiness from a ping to every primary, cluster topology
//! re-synced periodically and whenever a primary stops answering, scripts reloaded whenever the
//! primaries change. The server's upkeep task calls `upkeep` (through `Store::maintain`) about
//! twice a second.

use std::sync::atomic::Ordering;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;

use super::Inner;
use crate::metrics::StoreOp;

/// Upkeep rounds between periodic cluster topology syncs (about ten seconds).
const SYNC_EVERY_TICKS: u64 = 20;

/// How long one health ping may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

impl Inner {
    /// One upkeep round: probe, re-sync the topology when due, reload scripts after changes,
    /// and publish readiness.
    pub(super) async fn upkeep(&self) {
        let was = self.ready.load(Ordering::Relaxed);
        let primaries_before = self.primaries();
        let now = self.probe().await;
        // Topology: re-synced when a primary fails to answer (in `probe`), on MOVED (by fred),
        // and periodically here; scripts are loaded again whenever the primaries changed.
        let ticks = self.ticks.fetch_add(1, Ordering::Relaxed);
        if self.client.is_clustered() && ticks.is_multiple_of(SYNC_EVERY_TICKS) {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.client.sync_cluster()).await;
        }
        if now && (!was || self.primaries() != primaries_before) {
            self.load_scripts().await;
        }
        if now && !was {
            tracing::info!("redis reachable");
        } else if !now && was {
            tracing::warn!("redis unreachable");
        }
        self.ready.store(now, Ordering::Relaxed);
        self.cache.sweep(self.wall.now_us());
    }

    /// Pings every primary; re-syncs the topology when one does not answer.
    async fn probe(&self) -> bool {
        let opts = |server: Option<Server>| Options {
            timeout: Some(PROBE_TIMEOUT),
            fail_fast: true,
            max_attempts: Some(1),
            cluster_node: server,
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let up = self.ping_every_primary(&opts).await;
        self.opts
            .metrics
            .store_duration(StoreOp::Probe, started.elapsed().as_secs_f64());
        up
    }

    async fn ping_every_primary(&self, opts: &impl Fn(Option<Server>) -> Options) -> bool {
        if !self.client.is_clustered() {
            let pong: Result<String, Error> =
                self.client.with_options(&opts(None)).ping(None).await;
            return pong.is_ok();
        }
        let primaries = self.primaries();
        let mut ok = !primaries.is_empty();
        for server in primaries {
            let pong: Result<String, Error> = self
                .client
                .with_options(&opts(Some(server)))
                .ping(None)
                .await;
            ok &= pong.is_ok();
        }
        if !ok {
            let _ = tokio::time::timeout(PROBE_TIMEOUT, self.client.sync_cluster()).await;
        }
        ok
    }

    /// The primaries as fred last saw them (empty for a single node).
    fn primaries(&self) -> Vec<Server> {
        self.client
            .cached_cluster_state()
            .map(|s| s.unique_primary_nodes())
            .unwrap_or_default()
    }

    async fn load_scripts(&self) {
        if let Err(e) = self
            .client
            .script_load_cluster::<(), _>(self.script.lua)
            .await
        {
            tracing::warn!(error = %e, "loading the script failed; it loads on first use");
        }
    }
}
