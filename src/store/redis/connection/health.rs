//! Keeping the Redis store healthy: readiness from a ping to every primary, cluster topology
//! re-synced periodically and whenever a primary stops answering (from any node ever seen, not
//! only the URL's seeds), scripts reloaded whenever the primaries change, and the eviction
//! policy checked. The server's upkeep task calls `upkeep` (through `Store::maintain`) about
//! twice a second.
//!
//! When Redis is not reachable the store keeps why ([`StoreError`]: `redis 127.0.0.1:6390:
//! connection refused`), shown on `/readyz`, in logs and in the gRPC error of a call the
//! failure policy answered.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use parking_lot::Mutex;

use super::super::durability::replication;
use super::super::error::classify;
use super::super::scripts::script::Script;
use super::client::Clients;
use super::marker::Markers;
use crate::base::log_throttle;
use crate::store::error::Cause;
use crate::store::error::StoreError;
use crate::telemetry::counted::StoreOp;
use crate::telemetry::metrics::Metrics;

/// Upkeep rounds between periodic cluster topology syncs (about ten seconds).
const SYNC_EVERY_TICKS: u64 = 20;

/// Upkeep rounds between marker checks (about two seconds).
const MARKER_EVERY_TICKS: u64 = 4;

/// Upkeep rounds between eviction-policy checks (about a minute).
const EVICTION_EVERY_TICKS: u64 = 120;

/// How long one health ping may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The store's health as upkeep last found it. Upkeep sees the store only through its
/// clients and its script.
pub struct Health {
    ready: AtomicBool,
    /// Why the store is not ready, when it is not.
    reason: Mutex<Option<StoreError>>,
    /// A risk worth showing while ready (an evicting `maxmemory-policy`).
    eviction_warning: Mutex<Option<String>>,
    /// Upkeep rounds so far (`maintain` runs about twice a second).
    ticks: AtomicU64,
    metrics: Arc<Metrics>,
    /// `--read-replicas`: upkeep waits until fred knows of the replicas.
    read_replicas: bool,
    /// `--redis-wait-replicas`: upkeep counts each primary's connected replicas.
    wait_replicas: u32,
    /// Primaries with fewer replicas connected than `wait_replicas`, as `/readyz` says it.
    replicas_warning: Mutex<Option<String>>,
    /// Those primaries (`host:port`, or the URL's host on a single node), and how many they have.
    short: Mutex<Vec<(String, usize)>>,
    /// `short` is not empty: a call's check costs one load while every primary has its replicas.
    any_short: AtomicBool,
    /// The markers that tell a Redis came back empty, under `--redis-key-prefix`.
    markers: Markers,
    key_prefix: String,
    /// The cluster's primaries as the last upkeep round saw them (empty on one node).
    primaries: Mutex<Vec<Server>>,
}

impl Health {
    pub fn new(
        metrics: Arc<Metrics>,
        read_replicas: bool,
        wait_replicas: u32,
        key_prefix: String,
    ) -> Health {
        Health {
            ready: AtomicBool::new(false),
            reason: Mutex::new(Some(StoreError::new(
                "redis",
                Cause::NotRun("connecting".into()),
            ))),
            eviction_warning: Mutex::new(None),
            ticks: AtomicU64::new(0),
            metrics,
            read_replicas,
            wait_replicas,
            replicas_warning: Mutex::new(None),
            short: Mutex::new(Vec::new()),
            any_short: AtomicBool::new(false),
            markers: Markers::default(),
            key_prefix,
            primaries: Mutex::new(Vec::new()),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn reason(&self) -> Option<StoreError> {
        self.reason.lock().clone()
    }

    /// Every risk worth showing while ready, on one line.
    pub fn warning(&self) -> Option<String> {
        let warnings: Vec<String> = [&self.eviction_warning, &self.replicas_warning]
            .iter()
            .filter_map(|w| w.lock().clone())
            .chain(self.markers.warning())
            .collect();
        (!warnings.is_empty()).then(|| warnings.join("; "))
    }

    /// One upkeep round: probe, re-sync the topology when due, reload `script` after
    /// changes, check the eviction policy, and publish readiness.
    pub async fn upkeep(&self, clients: &Clients, script: &Script) {
        let was = self.ready.load(Ordering::Relaxed);
        // The primaries the last round that reached Redis saw: fred may learn of a failover
        // between rounds (a MOVED answer), and it must still be seen as one.
        let primaries_before = self.primaries.lock().clone();
        let probed = self.probe(clients).await;
        // Topology: re-synced when a primary fails to answer (in `probe`), on MOVED (by fred),
        // and periodically here; scripts are loaded again whenever the primaries changed.
        let ticks = self.ticks.fetch_add(1, Ordering::Relaxed);
        if clients.clustered && ticks.is_multiple_of(SYNC_EVERY_TICKS) {
            for client in clients.all() {
                let _ = tokio::time::timeout(Duration::from_secs(1), client.sync_cluster()).await;
            }
        }
        let now = probed.is_ok();
        let primaries = clients.primaries();
        // Compared with the last round Redis answered: a failover seen while the probe failed
        // (the old primary timing out as it steps down) is still one, logged once Redis answers.
        let changed = now && primaries != primaries_before;
        if now {
            *self.primaries.lock() = primaries.clone();
        }
        if now && (!was || changed) {
            load_script(clients, script).await;
        }
        if changed && !primaries_before.is_empty() {
            // A failover or a reshard: one line naming what left and what came.
            let names = |s: &[Server]| {
                s.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let gone: Vec<_> = primaries_before
                .iter()
                .filter(|p| !primaries.contains(p))
                .cloned()
                .collect();
            let new: Vec<_> = primaries
                .iter()
                .filter(|p| !primaries_before.contains(p))
                .cloned()
                .collect();
            tracing::warn!(
                node = %names(&gone),
                replaced_by = %names(&new),
                "redis primaries changed (a failover or a reshard): scripts loaded on the new ones"
            );
        }
        if now && (!was || ticks.is_multiple_of(EVICTION_EVERY_TICKS)) {
            self.check_eviction_policy(clients).await;
        }
        if now && ticks.is_multiple_of(MARKER_EVERY_TICKS) {
            for node in self.markers.check(clients, &self.key_prefix).await {
                self.metrics.store_data_lost.inc();
                tracing::warn!(
                    node = %format!("redis {node}"),
                    "redis came back without its data (tollgate's marker key is gone): every counter there restarted from zero"
                );
            }
        }
        if now && self.wait_replicas > 0 {
            self.count_replicas(clients, !was).await;
        }
        if now && self.read_replicas {
            // fred routes to the replicas its copy of CLUSTER SLOTS names, and a primary lists
            // a replica there only once the replica has acknowledged some replication: until
            // fred knows of any, re-read the topology (reads go to primaries meanwhile).
            for client in clients.all() {
                if client.replicas().nodes().is_empty() {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), client.sync_cluster()).await;
                }
            }
        }
        // One line per event, naming the node and the cause; readiness follows it
        // (serve/ logs its own change only when the store did not cause it).
        match &probed {
            Ok(()) if !was => {
                // The node it was unreachable at, or (starting) the URL's first host.
                let node = self.reason.lock().as_ref().map(|r| r.place.clone());
                let node = node
                    .filter(|p| p.starts_with("redis "))
                    .unwrap_or_else(|| format!("redis {}", clients.host));
                tracing::info!(node = %node, "redis reachable: ready");
            }
            Err(reason) if was => {
                // The line above is this event's: "still unreachable" waits a period.
                let _ = log_throttle::due("redis_unreachable");
                tracing::warn!(
                    %reason,
                    cause = reason.cause.kind(),
                    "redis unreachable: not ready"
                )
            }
            Err(reason) => {
                if let Some(suppressed) = log_throttle::due("redis_unreachable") {
                    tracing::warn!(
                        %reason,
                        cause = reason.cause.kind(),
                        suppressed,
                        "redis still unreachable"
                    );
                }
            }
            Ok(()) => {}
        }
        if now {
            *clients.connection_error.lock() = None;
        }
        *self.reason.lock() = probed.err();
        self.ready.store(now, Ordering::Relaxed);
    }

    /// Counts each primary's connected replicas for `--redis-wait-replicas` (warned about, shown
    /// on `/readyz` and as a metric while short). On `first`, the first round Redis answered,
    /// also says when no decision could ever be answered (fewer replicas than wanted at all).
    async fn count_replicas(&self, clients: &Clients, first: bool) {
        let wanted = self.wait_replicas;
        if first {
            if let Err(e) = replication::check(clients, wanted).await {
                tracing::error!(error = %e, "no decision that charges can be answered");
            }
        }
        let connected = replication::replicas(clients, false).await;
        let short: Vec<(String, usize)> = connected
            .iter()
            .filter(|(_, n)| *n < wanted as usize)
            .cloned()
            .collect();
        self.metrics.store_replicas_short.set(short.len() as i64);
        let warning = replication::shortfall(wanted, &short);
        self.any_short.store(!short.is_empty(), Ordering::Relaxed);
        *self.short.lock() = short;
        if let Some(w) = &warning {
            if let Some(suppressed) = log_throttle::due("redis_replicas_short") {
                tracing::warn!(warning = %w, suppressed, "redis replicas short");
            }
        }
        *self.replicas_warning.lock() = warning;
    }

    /// Whether any primary had fewer replicas connected than wanted at the last count.
    pub fn any_short(&self) -> bool {
        self.any_short.load(Ordering::Relaxed)
    }

    /// How many replicas `primary` had connected at the last count, when fewer than
    /// `--redis-wait-replicas` (on a single node `primary` is `None`).
    pub fn replicas_short(&self, primary: Option<&str>) -> Option<usize> {
        if !self.any_short.load(Ordering::Relaxed) {
            return None;
        }
        let short = self.short.lock();
        match primary {
            None => short.first().map(|(_, n)| *n),
            Some(p) => short.iter().find(|(s, _)| s == p).map(|(_, n)| *n),
        }
    }

    /// Pings every primary through every client (the serving threads' too: a call on any
    /// thread must find its connections up). The error is why.
    async fn probe(&self, clients: &Clients) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let mut up = Ok(());
        for client in clients.all() {
            up = ping_with(clients, &client).await;
            if up.is_err() {
                break;
            }
        }
        self.metrics
            .store_duration(StoreOp::Probe, started.elapsed().as_secs_f64());
        up
    }

    /// Any `maxmemory-policy` but `noeviction` lets Redis evict live counters (every tollgate
    /// key has a TTL, so the `volatile-*` policies pick them too): under-counting, so
    /// over-admission. Warned about, shown on `/readyz` and as a metric.
    async fn check_eviction_policy(&self, clients: &Clients) {
        let servers: Vec<Option<Server>> = if clients.clustered {
            clients.primaries().into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let mut risky = Vec::new();
        for server in servers {
            let opts = Options {
                timeout: Some(PROBE_TIMEOUT),
                cluster_node: server.clone(),
                ..Default::default()
            };
            // Managed Redis may forbid CONFIG: then nothing is known and nothing is said.
            let reply: Result<Vec<String>, Error> = clients
                .main()
                .with_options(&opts)
                .config_get("maxmemory-policy")
                .await;
            if let Ok(reply) = reply {
                if let Some(policy) = reply.get(1).filter(|p| p.as_str() != "noeviction") {
                    let host = server.map_or_else(|| clients.host.clone(), |s| s.to_string());
                    risky.push(format!(
                        "redis {host}: maxmemory-policy is {policy}, which can evict live counters (under-counting: over-admission); set noeviction"
                    ));
                }
            }
        }
        self.metrics
            .store_eviction_risk
            .set(i64::from(!risky.is_empty()));
        let warning = (!risky.is_empty()).then(|| risky.join("; "));
        if let Some(w) = &warning {
            if let Some(suppressed) = log_throttle::due("redis_eviction_policy") {
                tracing::warn!(warning = %w, suppressed, "redis may evict counters");
            }
        }
        *self.eviction_warning.lock() = warning;
    }
}

/// Pings every primary through `client`; re-syncs the topology when one does not answer.
async fn ping_with(clients: &Clients, client: &Client) -> Result<(), StoreError> {
    let opts = |server: Option<Server>| Options {
        timeout: Some(PROBE_TIMEOUT),
        fail_fast: true,
        max_attempts: Some(1),
        cluster_node: server,
        ..Default::default()
    };
    if !client.is_connected() && last_connection_error(clients).is_none() {
        // Still connecting (at start, or reconnecting): a ping fails as "closed" before fred
        // reports why; the attempt's own error names the cause (refused, TLS, …).
        if let Ok(Err(e)) = tokio::time::timeout(PROBE_TIMEOUT, client.wait_for_connect()).await {
            return Err(classify(&e, None, &clients.host));
        }
    }
    if !client.is_clustered() {
        let pong: Result<String, Error> = client.with_options(&opts(None)).ping(None).await;
        return pong.map(drop).map_err(|e| reason_for(clients, &e, None));
    }
    let primaries = clients.primaries();
    if primaries.is_empty() {
        let _ = tokio::time::timeout(PROBE_TIMEOUT, client.sync_cluster()).await;
        return Err(last_connection_error(clients).unwrap_or_else(|| {
            StoreError::new(
                format!("redis {}", clients.host),
                Cause::NotRun("cluster topology unknown".into()),
            )
        }));
    }
    let mut failure = None;
    for server in primaries {
        let pong: Result<String, Error> = client
            .with_options(&opts(Some(server.clone())))
            .ping(None)
            .await;
        if let Err(e) = pong {
            failure.get_or_insert_with(|| reason_for(clients, &e, Some(&server)));
        }
    }
    match failure {
        None => Ok(()),
        Some(reason) => {
            let _ = tokio::time::timeout(PROBE_TIMEOUT, client.sync_cluster()).await;
            Err(reason)
        }
    }
}

/// The connection error fred reported most recently, else `e` classified.
fn reason_for(clients: &Clients, e: &Error, server: Option<&Server>) -> StoreError {
    last_connection_error(clients).unwrap_or_else(|| classify(e, server, &clients.host))
}

fn last_connection_error(clients: &Clients) -> Option<StoreError> {
    clients.connection_error.lock().clone()
}

async fn load_script(clients: &Clients, script: &Script) {
    if let Err(e) = clients
        .main()
        .script_load_cluster::<(), _>(script.lua)
        .await
    {
        tracing::warn!(error = %e, "loading the script failed; it loads on first use");
    }
}
