//! Shared helpers for the integration tests: a real tollgate server started in-process on
//! free ports with a YAML config in its own temp dir, real clients (tonic, tonic-health,
//! reqwest) and request builders. Every wait here is bounded by [`TIMEOUT`].
//!
//! Time in the memory store is a [`ManualClock`] fixed at [`T0_US`], 10 s into a minute, so
//! fixed windows never roll over mid-test and waits are exact (50 s to the minute's end).

// Each test crate that includes this module uses a subset of it.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tollgate::base::clock::ManualClock;
use tollgate::base::shutdown::Shutdown;
use tollgate::config::load::LoadOptions;
use tollgate::pb::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::serve::transport::Transport;
use tollgate::serve::{self, ConfigSource, Running, ServerOptions};
use tollgate::service::settings::Settings;
use tollgate::store::any::AnyStore;
use tollgate::store::memory::MemoryStore;
use tollgate::store::Store;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Upper bound for any single wait in a test.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The manual clock's time: 2023-11-14T22:14:10Z, 10 s into a minute.
pub const T0_US: u64 = 1_700_000_050_000_000;

/// Awaits `fut`, failing the test if it takes longer than [`TIMEOUT`].
pub async fn bounded<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {TIMEOUT:?}: {what}"),
    }
}

/// A config file in a temp dir of its own, removed on drop.
pub struct TempConfig {
    pub dir: PathBuf,
    pub path: PathBuf,
}

impl TempConfig {
    pub fn new(yaml: &str) -> TempConfig {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "tollgate-test-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let config = TempConfig {
            path: dir.join("ratelimit.yaml"),
            dir,
        };
        config.write(yaml);
        config
    }

    /// Replaces the file atomically, so a reload never reads half a file.
    pub fn write(&self, yaml: &str) {
        let tmp = self.dir.join(".ratelimit.yaml.tmp");
        std::fs::write(&tmp, yaml).expect("write temp config");
        std::fs::rename(&tmp, &self.path).expect("replace config");
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How a test server is started, beyond its config.
#[derive(Debug, Clone)]
pub struct TestOptions {
    pub settings: Settings,
    pub reload_interval: Option<Duration>,
    pub drain_delay: Duration,
    /// Serve `POST /json` (`--admin-json`).
    pub admin_json: bool,
    /// `--config` names the config's directory, not its file.
    pub config_dir: bool,
    /// `--admin-token-file` with this token, and `--admin-write-addr` on a free port.
    pub admin_token: Option<String>,
}

impl Default for TestOptions {
    fn default() -> TestOptions {
        TestOptions {
            settings: Settings::default(),
            reload_interval: None,
            drain_delay: Duration::ZERO,
            admin_json: false,
            config_dir: false,
            admin_token: None,
        }
    }
}

impl From<Settings> for TestOptions {
    fn from(settings: Settings) -> TestOptions {
        TestOptions {
            settings,
            ..TestOptions::default()
        }
    }
}

/// A running server and its config file.
pub struct TestServer {
    pub running: Running,
    pub config: TempConfig,
}

impl TestServer {
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.running.grpc_addr)
    }

    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.http_addr)
    }

    /// A rate limit client on a connection of its own.
    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(channel(self.running.grpc_addr).await)
    }

    pub async fn health(&self) -> HealthClient<Channel> {
        HealthClient::new(channel(self.running.grpc_addr).await)
    }

    /// Triggers shutdown and waits (bounded) for both servers to stop.
    pub async fn stop(self) {
        bounded("server stop", self.running.stop())
            .await
            .expect("server stopped with an error");
    }
}

/// Starts a server on the memory store (manual clock at [`T0_US`]) and waits until ready.
pub async fn start(yaml: &str, opts: impl Into<TestOptions>) -> TestServer {
    let store = Arc::new(MemoryStore::new(Arc::new(ManualClock::new(T0_US))));
    start_with_store(yaml, opts.into(), store).await
}

/// Starts a server on `store` with both listeners on free ports and waits until ready.
pub async fn start_with_store<S: Store>(
    yaml: &str,
    opts: TestOptions,
    store: Arc<S>,
) -> TestServer {
    let server = start_unready(yaml, opts, store).await;
    let mut health = server.health().await;
    for name in serve::HEALTH_SERVICES {
        wait_health(&mut health, name, ServingStatus::Serving).await;
    }
    server
}

/// Starts a server on `store` with both listeners on free ports, without waiting for the
/// store to be ready.
pub async fn start_unready<S: Store>(yaml: &str, opts: TestOptions, store: Arc<S>) -> TestServer {
    let config = TempConfig::new(yaml);
    let server_opts = ServerOptions {
        grpc_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        extra_admin_addrs: Vec::new(),
        admin_json: opts.admin_json,
        admin_ui: true,
        admin_write_addr: opts
            .admin_token
            .is_some()
            .then(|| SocketAddr::from(([127, 0, 0, 1], 0))),
        admin_token: opts.admin_token.as_deref().map(|t| {
            Arc::new(tollgate::admin::token::AdminToken::new(t.as_bytes()).expect("a token"))
        }),
        admin_max_connections: 256,
        metrics_path: "/metrics".into(),
        transport: Transport::default(),
        config: ConfigSource::Files(if opts.config_dir {
            config.dir.clone()
        } else {
            config.path.clone()
        }),
        ready_needs_config: false,
        load: LoadOptions::default(),
        settings: opts.settings,
        reload_interval: opts.reload_interval,
        drain_delay: opts.drain_delay,
        shutdown_grace: Duration::from_secs(2),
        metrics: Arc::default(),
        serving_threads: 0,
    };
    let running = bounded(
        "server::start",
        serve::start(server_opts, AnyStore::new(store), Shutdown::new()),
    )
    .await
    .expect("server starts");
    TestServer { running, config }
}

/// A connection to `addr` with bounded connect and call times.
pub async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("valid endpoint")
        .connect_timeout(TIMEOUT)
        .timeout(TIMEOUT)
        .connect()
        .await
        .expect("connect to the gRPC server")
}

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .expect("HTTP client")
}

/// The gRPC health status of `service`.
pub async fn health_status(
    client: &mut HealthClient<Channel>,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    let resp = bounded(
        "health check",
        client.check(HealthCheckRequest {
            service: service.to_string(),
        }),
    )
    .await?;
    Ok(resp.into_inner().status())
}

/// Polls gRPC health until `service` reports `want`. The server sets its health names one
/// after another, so each name is waited for on its own.
pub async fn wait_health(client: &mut HealthClient<Channel>, service: &str, want: ServingStatus) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let status = health_status(client, service).await;
        if status.as_ref().ok() == Some(&want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "health for '{service}' is {status:?}, not {want:?}, after {TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A descriptor from `key=value` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|&(key, value)| Entry {
                key: key.to_string(),
                value: value.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A descriptor with a request-side limit override.
pub fn with_override(
    mut d: RateLimitDescriptor,
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit,
    });
    d
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

/// A request with one descriptor per `key=value` entry list.
pub fn req(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    request(domain, descriptors.iter().map(|e| descriptor(e)).collect())
}

/// Calls ShouldRateLimit and returns the raw result.
pub async fn try_call(
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    bounded("ShouldRateLimit", client.should_rate_limit(req))
        .await
        .map(tonic::Response::into_inner)
}

/// Calls ShouldRateLimit, expecting an answer, and checks the invariants every answer keeps:
/// one status per descriptor, and no code is UNKNOWN.
pub async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> RateLimitResponse {
    let n = req.descriptors.len();
    let resp = try_call(client, req)
        .await
        .expect("ShouldRateLimit answers");
    assert_ne!(
        resp.overall_code,
        Code::Unknown as i32,
        "overall code UNKNOWN"
    );
    assert_eq!(
        resp.statuses.len(),
        n,
        "one status per descriptor: {resp:?}"
    );
    for (i, s) in resp.statuses.iter().enumerate() {
        assert_ne!(s.code, Code::Unknown as i32, "status {i} UNKNOWN: {resp:?}");
    }
    resp
}

/// Calls ShouldRateLimit expecting INVALID_ARGUMENT; returns the message.
pub async fn call_invalid(
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> String {
    match try_call(client, req).await {
        Ok(resp) => panic!("expected INVALID_ARGUMENT, got an answer: {resp:?}"),
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(!status.message().is_empty(), "no message: {status:?}");
            status.message().to_string()
        }
    }
}

pub const OK: i32 = Code::Ok as i32;
pub const OVER_LIMIT: i32 = Code::OverLimit as i32;

/// A port that was free a moment ago (for a process that binds its own): see [`pick_port`].
pub fn free_port() -> u16 {
    pick_port(false)
}

/// Ports for a process that binds them itself (tollgate, Envoy): free now, and never handed
/// out twice by this process.
pub fn ports<const N: usize>() -> [u16; N] {
    let mut out = [0; N];
    for port in &mut out {
        *port = pick_port(false);
    }
    out
}

/// Every port this process handed out (tollgate, Envoy, Redis and its cluster bus, the
/// control plane): never handed out twice.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A loopback port nobody listens on now, never handed out before by this process, and below
/// the kernel's ephemeral range (`ip_local_port_range`): a port the kernel offers for
/// `bind(0)` is one it may also give the next client socket of any test before the server
/// that was meant to bind it does ("Address already in use"), and below that range no client
/// socket is ever given one. With `bus`, port + 10000 is free and below that range too (a
/// Redis Cluster node's bus).
pub fn pick_port(bus: bool) -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (low, high) = if bus {
        (10_000u16, ephemeral.saturating_sub(10_000))
    } else {
        (10_000u16, ephemeral)
    };
    assert!(
        high > low + 1000,
        "the ephemeral range starts too low: {ephemeral}"
    );
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    for _ in 0..10_000 {
        // xorshift from the process id and the clock: parallel test binaries start apart.
        let mut x = STATE.load(Ordering::Relaxed);
        if x == 0 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            x = nanos ^ (u64::from(std::process::id()) << 32) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        STATE.store(x, Ordering::Relaxed);
        let p = low + (x % u64::from(high - low)) as u16;
        let taken = |p: u16| handed_out.contains(&p);
        if taken(p) || (bus && taken(p + 10_000)) {
            continue;
        }
        if free(p) && (!bus || free(p + 10_000)) {
            handed_out.insert(p);
            if bus {
                handed_out.insert(p + 10_000);
            }
            return p;
        }
    }
    panic!("found no free loopback port in {low}..{high}");
}
