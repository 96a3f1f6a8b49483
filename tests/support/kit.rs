//! The behaviour kit: one way to get a store under test — the memory store, a single Redis
//! node, a Redis Cluster (real `redis-server` processes) — so every behaviour suite runs over
//! all three, and a failing case names its store.
//!
//! Redis fixtures are started once per test binary, on first use, and shared: every store gets
//! a key prefix of its own, so tests never share counters. Time is a [`ManualClock`] the test
//! drives; Redis stores take "now" from it too (`ClockSource::Local`), so every store sees the
//! same time.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tollgate::base::clock::{Clock, ManualClock};
use tollgate::config::load::{compile_sources, LoadOptions};
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
pub use tollgate::store::any::AnyStore;
use tollgate::store::memory::MemoryStore;
use tollgate::store::placement::Layout;
use tollgate::store::redis::options::{ClockSource, RedisOptions};
use tollgate::store::redis::RedisStore;
use tollgate::store::Store;

use super::redis::{RedisCluster, RedisServer};

/// Where counters live in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Redis,
    Cluster,
}

impl StoreKind {
    pub const ALL: [StoreKind; 3] = [StoreKind::Memory, StoreKind::Redis, StoreKind::Cluster];

    /// How failures name the store.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::Cluster => "cluster",
        }
    }
}

/// Runs blocking harness work (redis-cli, process start) without stalling the runtime.
/// Needs a multi-threaded runtime.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// The single Redis node every test of this binary shares.
pub fn redis_single() -> &'static RedisServer {
    static SINGLE: OnceLock<&'static RedisServer> = OnceLock::new();
    SINGLE.get_or_init(|| RedisServer::start().keep_until_exit())
}

/// The Redis Cluster (3 primaries, no replicas) every test of this binary shares.
pub fn redis_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<&'static RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(3, 0).keep_until_exit())
}

/// A key prefix no other store of this process uses.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_007);
    format!(
        "t{}-{nanos}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// How a Redis store under test is set up.
#[derive(Clone)]
pub struct RedisSetup {
    pub url: String,
    pub key_prefix: String,
    pub timeout: Duration,
    pub clock: ClockSource,
    /// The instance clock (local over-limit cache).
    pub wall: Arc<dyn Clock>,
    pub local_cache_size: usize,
    /// TLS: the CA to trust, and a client certificate and key.
    pub ca_file: Option<std::path::PathBuf>,
    pub client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Where the store counts (round trips, leases).
    pub metrics: Arc<tollgate::telemetry::metrics::Metrics>,
    /// `--read-replicas`.
    pub read_replicas: bool,
    /// `--redis-wait-replicas`.
    pub wait_replicas: u32,
}

impl RedisSetup {
    /// A store on `url` with its own prefix, deciding at `clock`'s time.
    pub fn new(url: String, clock: &ManualClock) -> RedisSetup {
        RedisSetup {
            url,
            key_prefix: unique_prefix(),
            timeout: Duration::from_secs(2),
            clock: ClockSource::Local(Arc::new(clock.clone())),
            wall: Arc::new(clock.clone()),
            local_cache_size: 1000,
            ca_file: None,
            client_cert: None,
            metrics: Arc::default(),
            read_replicas: false,
            wait_replicas: 0,
        }
    }

    /// The one RedisStore builder of the tests.
    pub fn connect(self) -> RedisStore {
        RedisStore::connect(
            RedisOptions {
                url: self.url,
                password: None,
                key_prefix: self.key_prefix,
                timeout: self.timeout,
                connect_timeout: Duration::from_secs(1),
                clock: self.clock,
                local_cache_size: self.local_cache_size,
                metrics: self.metrics,
                read_replicas: self.read_replicas,
                wait_replicas: self.wait_replicas,
                ca_file: self.ca_file,
                client_cert: self.client_cert,
            },
            self.wall,
        )
        .expect("redis store")
    }
}

/// Two stores on `kind`'s Redis (a single node or the cluster) sharing one key prefix, each
/// ready: two instances racing on the same counters.
pub async fn two_instances(kind: StoreKind, clock: &ManualClock) -> [Arc<AnyStore>; 2] {
    let url = redis_url(kind).expect("a Redis");
    let prefix = unique_prefix();
    let mut stores = Vec::new();
    for _ in 0..2 {
        let mut setup = RedisSetup::new(url.clone(), clock);
        setup.key_prefix = prefix.clone();
        let store: Arc<AnyStore> = Arc::new(setup.connect().into());
        wait_ready(&*store).await;
        stores.push(store);
    }
    [stores[0].clone(), stores[1].clone()]
}

/// The limiters that race on `kind`, each over `yaml` with `settings`: one on the memory store
/// (one process), two instances sharing one key prefix on Redis or the cluster.
pub async fn racing_limiters(
    kind: StoreKind,
    clock: &ManualClock,
    yaml: &str,
    settings: Settings,
) -> Vec<Arc<RateLimiter<AnyStore>>> {
    match kind {
        StoreKind::Memory => vec![Arc::new(limiter(yaml, settings, store(kind, clock).await))],
        _ => two_instances(kind, clock)
            .await
            .map(|s| Arc::new(limiter(yaml, settings.clone(), s)))
            .to_vec(),
    }
}

/// Runs upkeep until `store` is ready (bounded).
pub async fn wait_ready<S: Store>(store: &S) {
    for _ in 0..200 {
        store.maintain().await;
        if store.is_ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("store did not become ready within 5 s");
}

/// The URL of `kind`'s shared Redis (none for memory).
pub fn redis_url(kind: StoreKind) -> Option<String> {
    match kind {
        StoreKind::Memory => None,
        StoreKind::Redis => Some(blocking(|| redis_single().url())),
        StoreKind::Cluster => Some(blocking(|| redis_cluster().seed_url())),
    }
}

/// A memory store that groups a request's charges as a store of `kind` does: by hash tag,
/// step for step, for a cluster; in one group for one Redis node (and memory's default).
pub async fn memory_like(kind: StoreKind, clock: &ManualClock) -> Arc<AnyStore> {
    let layout = match kind {
        StoreKind::Cluster => Layout::ByTag,
        StoreKind::Memory | StoreKind::Redis => Layout::OneNode,
    };
    let store = MemoryStore::new(Arc::new(clock.clone())).with_layout(layout);
    Arc::new(store.into())
}

/// A ready store of `kind` on `clock`, with `adjust` applied to a Redis store's setup.
pub async fn store_with(
    kind: StoreKind,
    clock: &ManualClock,
    adjust: impl FnOnce(&mut RedisSetup),
) -> Arc<AnyStore> {
    let store = match redis_url(kind) {
        None => MemoryStore::new(Arc::new(clock.clone())).into(),
        Some(url) => {
            let mut setup = RedisSetup::new(url, clock);
            adjust(&mut setup);
            setup.connect().into()
        }
    };
    wait_ready(&store).await;
    Arc::new(store)
}

/// A ready store of `kind` on `clock`.
pub async fn store(kind: StoreKind, clock: &ManualClock) -> Arc<AnyStore> {
    store_with(kind, clock, |_| {}).await
}

/// A limiter over `store` with `yaml` as its config.
pub fn limiter<S: Store>(yaml: &str, settings: Settings, store: Arc<S>) -> RateLimiter<S> {
    limiter_with(&[yaml], &LoadOptions::default(), settings, store)
}

/// A limiter over `store` with one config file per `yamls` entry, compiled with `load`.
pub fn limiter_with<S: Store>(
    yamls: &[&str],
    load: &LoadOptions,
    settings: Settings,
    store: Arc<S>,
) -> RateLimiter<S> {
    let sources: Vec<(String, String)> = yamls
        .iter()
        .enumerate()
        .map(|(i, yaml)| (format!("test{i}.yaml"), yaml.to_string()))
        .collect();
    let config = compile_sources(&sources, load)
        .unwrap_or_else(|e| panic!("test config does not compile: {e}\n{yamls:?}"));
    RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store,
        settings,
        Arc::default(),
        None,
    )
}

/// Runs `suite` once per store kind, each on a thread of its own (Redis fixtures start
/// blocking), and reports every kind that failed with its panic message.
pub fn for_every_store<F, Fut>(suite: F)
where
    F: Fn(StoreKind) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()>,
{
    for_stores(&StoreKind::ALL, suite)
}

/// [`for_every_store`] over `kinds` only.
pub fn for_stores<F, Fut>(kinds: &[StoreKind], suite: F)
where
    F: Fn(StoreKind) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()>,
{
    let mut failures = Vec::new();
    for &kind in kinds {
        let suite = suite.clone();
        let run = std::thread::spawn(move || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(suite(kind))
        });
        if let Err(panic) = run.join() {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("[{}] {msg}", kind.name()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Fixed windows are epoch-aligned; on real time, waits for the next `window` if fewer than
/// `need` remain in this one, so a burst never straddles a boundary (which would legitimately
/// admit twice).
pub async fn avoid_window_edge(window: Duration, need: Duration) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    let into = Duration::from_micros((now.as_micros() % window.as_micros()) as u64);
    let left = window - into;
    if left < need {
        tokio::time::sleep(left + Duration::from_millis(200)).await;
    }
}
