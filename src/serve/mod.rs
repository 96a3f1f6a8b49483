//! Starts and stops tollgate: the gRPC server (rate limit service + `grpc.health.v1`), the
//! HTTP admin server, and the background tasks (readiness, config reload, store upkeep).
//!
//! Readiness is one fact shown three ways (gRPC health for `""`, `ratelimit` and the RLS
//! service name; `/readyz`; `/healthcheck`): the store is ready and we are not shutting down.
//! On shutdown readiness drops first, then after `drain_delay` the listeners stop accepting
//! and in-flight calls finish.

pub mod admin_http;
pub mod grpc;
pub mod reservations;
pub mod slots;
pub mod threads;
pub mod transport;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;

use crate::admin;
use crate::admin::state::AdminState;
use crate::base::clock::SystemClock;
use crate::base::shutdown::Shutdown;
use crate::config::load::{compile_sources, read_sources, LoadOptions};
use crate::config::reload::{ReloadStatus, Reloader};
use crate::config::xds::client::XdsSource;
use crate::config::xds::{XdsOptions, XdsState};
use crate::config::Config;
use crate::serve::grpc::Calls;
use crate::serve::transport::{Connections, Transport};
use crate::service::settings::{FailureMode, Settings};
use crate::service::RateLimiter;
use crate::store::any::AnyStore;
use crate::store::memory::MemoryStore;
use crate::store::Store;
use crate::telemetry::metrics::Metrics;

/// Names under which gRPC health reports the service.
pub const HEALTH_SERVICES: [&str; 3] = [
    "",
    "ratelimit",
    "envoy.service.ratelimit.v3.RateLimitService",
];

#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// More addresses serving the admin router (envoyproxy/ratelimit's debug port 6070 with
    /// `/rlconfig`, its Prometheus port).
    pub extra_admin_addrs: Vec<SocketAddr>,
    /// Serve `POST /json` (it charges real counters with caller-chosen hits; off by default).
    pub admin_json: bool,
    /// Serve the status page at `/` (`--admin-ui`).
    pub admin_ui: bool,
    /// The write listener: `POST /counters/reset`, with `admin_token` (unset: none).
    pub admin_write_addr: Option<SocketAddr>,
    /// Open connections per admin listener at most (`--admin-max-connections`).
    pub admin_max_connections: usize,
    /// `--admin-token-file`: required on the write listener, and then for `/counters`, `/top`
    /// and the status page too.
    pub admin_token: Option<Arc<crate::admin::token::AdminToken>>,
    /// `/metrics` also under this path.
    pub metrics_path: String,
    pub transport: Transport,
    pub config: ConfigSource,
    pub load: LoadOptions,
    /// Readiness also needs a config with at least one domain.
    pub ready_needs_config: bool,
    pub settings: Settings,
    /// How often to look for config changes; `None` disables reloading.
    pub reload_interval: Option<Duration>,
    /// Time between readiness going NOT_SERVING and the listeners closing.
    pub drain_delay: Duration,
    /// After the drain, how long in-flight calls and open streams (such as a health Watch,
    /// which never ends by itself) may take before the servers stop regardless.
    pub shutdown_grace: Duration,
    /// Where every part of the server counts (shared with the store).
    pub metrics: Arc<Metrics>,
    /// Threads serving gRPC connections, each with a runtime of its own; 0 = one per core.
    pub serving_threads: usize,
}

/// Where the config comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// A file, or a directory of them (re-read every `reload_interval`).
    Files(PathBuf),
    /// An xDS control plane.
    Xds(Box<XdsOptions>),
}

/// Binds `addr`; an unspecified IPv6 address (`[::]`, dual-stack) falls back to `0.0.0.0` on
/// the same port where the host has no IPv6.
pub async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(e) if addr.ip() == std::net::Ipv6Addr::UNSPECIFIED && no_ipv6(&e) => {
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            tracing::info!(%addr, fallback = %v4, error = %e, "no IPv6 here; listening on IPv4");
            TcpListener::bind(v4)
                .await
                .with_context(|| format!("cannot listen for {what} on {v4}"))
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen for {what} on {addr}")),
    }
}

fn no_ipv6(e: &std::io::Error) -> bool {
    // EAFNOSUPPORT (97) and EADDRNOTAVAIL (99) on Linux; the portable kinds where they exist.
    matches!(
        e.kind(),
        std::io::ErrorKind::AddrNotAvailable | std::io::ErrorKind::Unsupported
    ) || matches!(e.raw_os_error(), Some(97 | 99))
}

/// A started server.
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The write listener's address (`--admin-write-addr`).
    pub admin_write_addr: Option<SocketAddr>,
    pub shutdown: Shutdown,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
    /// The store's [`Store::close`], once serving has stopped.
    close: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Running {
    /// Waits until both servers have stopped (after a shutdown trigger).
    pub async fn wait(self) -> anyhow::Result<()> {
        for t in self.tasks {
            t.await.context("server task panicked")??;
        }
        self.close.await;
        tracing::info!("tollgate stopped: listeners closed, in-flight calls finished");
        Ok(())
    }

    /// Triggers shutdown and waits for the drain.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.trigger();
        self.wait().await
    }
}

/// Loads the config, binds both listeners and starts serving. A bad config is an error here;
/// later, a bad config file only logs and keeps the running config.
///
/// Neither generic over the store nor an `async fn` (whose body would be compiled again by
/// each crate that awaits it), so that this whole server is compiled once, in this crate (see
/// [`AnyStore`]).
pub fn start(
    opts: ServerOptions,
    store: AnyStore,
    shutdown: Shutdown,
) -> Pin<Box<dyn Future<Output = anyhow::Result<Running>> + Send>> {
    Box::pin(start_serving(opts, Arc::new(store), shutdown))
}

async fn start_serving(
    opts: ServerOptions,
    store: Arc<AnyStore>,
    shutdown: Shutdown,
) -> anyhow::Result<Running> {
    let reload_status = Arc::new(ReloadStatus::new(opts.metrics.clone()));
    let (config, xds_state) = load_config(&opts, &reload_status, &shutdown).await?;
    let limiter = Arc::new(RateLimiter::new(
        config.clone(),
        store.clone(),
        opts.settings.clone(),
        opts.metrics.clone(),
        local_fallback(&opts),
    ));
    let listeners = Listeners::bind(&opts).await?;
    let (health_service, ready) = start_health(&opts, &store, config.clone(), &shutdown).await;
    tokio::spawn(upkeep(store.clone(), shutdown.clone()));
    if let AnyStore::Redis(redis) = &*store {
        if let Some(regional) = redis.regional() {
            tokio::spawn(regional.run(config.clone(), shutdown.clone()));
        }
    }
    let life = Lifetimes {
        shutdown: shutdown.clone(),
        drain_delay: opts.drain_delay,
        grace: opts.drain_delay + opts.shutdown_grace,
    };
    let threads = threads::thread_count(opts.serving_threads);
    let grpc_addr = listeners.grpc.local_addr()?;
    // The other gRPC services, beside `ShouldRateLimit` (served by `grpc::Calls` itself).
    let routes = tonic::service::Routes::new(health_service)
        .add_service(
            crate::pb::tollgate::slots::v1::slots_server::SlotsServer::new(
                crate::serve::slots::SlotsService::new(limiter.clone()),
            ),
        )
        .add_service(
            crate::pb::tollgate::reservations::v1::reservations_server::ReservationsServer::new(
                crate::serve::reservations::ReservationsService::new(limiter.clone()),
            ),
        );
    let grpc = start_grpc(
        &opts,
        listeners.grpc,
        threads,
        &limiter,
        routes,
        &store,
        &life,
    )?;
    let admin_state = Arc::new(AdminState {
        limiter,
        config,
        reload_status,
        ready,
        ready_needs_config: opts.ready_needs_config,
        xds: xds_state,
        metrics_path: opts.metrics_path.clone(),
        token: opts.admin_token.clone(),
        config_source: match &opts.config {
            ConfigSource::Files(path) => format!("files {}", path.display()),
            ConfigSource::Xds(xds) => format!("xDS {}", xds.server),
        },
    });
    let http_addr = listeners.admin.http.local_addr()?;
    let admin_write_addr = match &listeners.admin.write {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };
    let mut tasks = start_admin(&opts, admin_state, listeners.admin, &life)?;
    tracing::info!(
        %grpc_addr,
        %http_addr,
        tls = opts.transport.tls.is_some(),
        serving_threads = threads,
        "tollgate serving"
    );
    tasks.push(grpc);
    let close = Box::pin(async move { store.close().await });
    Ok(Running {
        grpc_addr,
        http_addr,
        admin_write_addr,
        shutdown,
        tasks,
        close,
    })
}

/// The config, from files (re-read every `reload_interval`) or an xDS control plane (waited
/// for unless `start_without_config`), and what the admin pages show of xDS.
async fn load_config(
    opts: &ServerOptions,
    reload_status: &Arc<ReloadStatus>,
    shutdown: &Shutdown,
) -> anyhow::Result<(Arc<ArcSwap<Config>>, Option<(String, Arc<XdsState>)>)> {
    match &opts.config {
        ConfigSource::Files(path) => {
            let sources = read_sources(path, opts.load.files)?;
            let config = compile_sources(&sources, &opts.load)?;
            config.warn_if_empty(path);
            let config = Arc::new(ArcSwap::from_pointee(config));
            reload_status.loaded();
            if let Some(every) = opts.reload_interval {
                let reloader = Reloader {
                    path: path.clone(),
                    load: opts.load.clone(),
                    config: config.clone(),
                    status: reload_status.clone(),
                    every,
                };
                tokio::spawn(reloader.run(sources, shutdown.clone()));
            }
            Ok((config, None))
        }
        ConfigSource::Xds(xds) => {
            let config = Arc::new(ArcSwap::from_pointee(Config::default()));
            let state = XdsState::new();
            let source = XdsSource {
                opts: (**xds).clone(),
                load: opts.load.clone(),
                config: config.clone(),
                status: reload_status.clone(),
                state: state.clone(),
                metrics: opts.metrics.clone(),
            };
            let endpoint = source.endpoint()?;
            let (first, applied) = tokio::sync::oneshot::channel();
            tokio::spawn(source.run(endpoint, first, shutdown.clone()));
            if !xds.start_without_config {
                tracing::info!(server = %xds.server, "waiting for the first config from the xDS server");
                tokio::select! {
                    _ = applied => {}
                    _ = shutdown.wait() => anyhow::bail!("stopped before the first xDS config arrived"),
                }
            }
            Ok((config, Some((xds.server.clone(), state))))
        }
    }
}

/// `--failure-mode local`'s in-process limiter.
fn local_fallback(opts: &ServerOptions) -> Option<MemoryStore> {
    (opts.settings.failure_mode == FailureMode::Local).then(|| {
        MemoryStore::new(Arc::new(SystemClock))
            .with_metrics(opts.metrics.clone())
            .with_max_bytes(opts.settings.max_store_bytes)
    })
}

/// Every listener, bound before anything is served (a taken port fails the start).
struct Listeners {
    grpc: TcpListener,
    admin: AdminListeners,
}

/// The admin listeners: the main one, the extra ones (`--debug-addr`, `--metrics-addr`) and
/// the write listener (`--admin-write-addr`).
struct AdminListeners {
    http: TcpListener,
    extra: Vec<TcpListener>,
    write: Option<TcpListener>,
}

impl Listeners {
    async fn bind(opts: &ServerOptions) -> anyhow::Result<Listeners> {
        let grpc = bind(opts.grpc_addr, "gRPC").await?;
        let http = bind(opts.http_addr, "HTTP").await?;
        let mut extra = Vec::new();
        for addr in &opts.extra_admin_addrs {
            extra.push(bind(*addr, "HTTP").await?);
        }
        if opts.admin_write_addr.is_some() && opts.admin_token.is_none() {
            anyhow::bail!("--admin-write-addr needs --admin-token-file: resets require a token");
        }
        let write = match opts.admin_write_addr {
            Some(addr) => Some(bind(addr, "admin writes").await?),
            None => None,
        };
        Ok(Listeners {
            grpc,
            admin: AdminListeners { http, extra, write },
        })
    }
}

/// gRPC health NOT_SERVING until readiness says otherwise, and the task that follows it.
async fn start_health(
    opts: &ServerOptions,
    store: &Arc<AnyStore>,
    config: Arc<ArcSwap<Config>>,
    shutdown: &Shutdown,
) -> (
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    Arc<AtomicBool>,
) {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_SERVICES {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    let ready = Arc::new(AtomicBool::new(false));
    // Readiness must reflect the store before `follow_readiness` first reports it (its first
    // line would otherwise name the store's reason before the store first looked).
    store.maintain().await;
    tokio::spawn(follow_readiness(
        store.clone(),
        opts.ready_needs_config.then_some(config),
        shutdown.clone(),
        ready.clone(),
        reporter,
        opts.metrics.clone(),
    ));
    (health_service, ready)
}

/// How the server winds down: on shutdown, readiness drops, and the listeners close
/// `drain_delay` later; `grace` after the shutdown, whatever is still open is stopped.
#[derive(Clone)]
struct Lifetimes {
    shutdown: Shutdown,
    drain_delay: Duration,
    grace: Duration,
}

impl Lifetimes {
    /// Resolves when the listeners should stop accepting.
    fn drain(&self) -> impl Future<Output = ()> + Send + 'static {
        let (shutdown, delay) = (self.shutdown.clone(), self.drain_delay);
        async move {
            shutdown.wait().await;
            tokio::time::sleep(delay).await;
        }
    }

    /// Resolves when what is still open must stop.
    fn deadline(&self) -> impl Future<Output = ()> + Send + 'static {
        let (shutdown, grace) = (self.shutdown.clone(), self.grace);
        async move {
            shutdown.wait().await;
            tokio::time::sleep(grace).await;
        }
    }
}

/// The serving threads: each serves its connections with clones of the same services
/// (`ShouldRateLimit`, and `routes`: health, slots, reservations).
fn start_grpc(
    opts: &ServerOptions,
    listener: TcpListener,
    threads: usize,
    limiter: &Arc<RateLimiter<AnyStore>>,
    routes: tonic::service::Routes,
    store: &Arc<AnyStore>,
    life: &Lifetimes,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let connections = Connections::new(&opts.transport)?;
    let serve = {
        let (store, limiter, life) = (store.clone(), limiter.clone(), life.clone());
        move |accepted: threads::Accepted| {
            let calls = Calls::new(limiter.clone(), routes.clone());
            let (connections, drain, deadline) =
                (connections.clone(), life.drain(), life.deadline());
            let serve = async move {
                tokio::select! {
                    () = transport::serve(accepted, calls, connections, drain) => {}
                    _ = deadline => {
                        tracing::warn!("gRPC calls still open after the grace period; stopping");
                    }
                }
                Ok(())
            };
            let store = store.clone();
            async move { store.serve_thread(serve).await }
        }
    };
    threads::start_threads(
        listener,
        threads,
        opts.transport.max_connections,
        serve,
        life.drain(),
    )
}

/// Serves the admin listeners; each task stops at the drain, the main one at the grace period
/// at the latest.
fn start_admin(
    opts: &ServerOptions,
    state: Arc<AdminState<AnyStore>>,
    listeners: AdminListeners,
    life: &Lifetimes,
) -> anyhow::Result<Vec<JoinHandle<anyhow::Result<()>>>> {
    let app = admin::router(state.clone(), opts.admin_json, opts.admin_ui);
    // Each budget's biggest spenders read once a minute, for their burn rates.
    tokio::spawn(admin::budgets::sample_every_minute(state.clone()));
    let max = opts.admin_max_connections;
    let mut tasks = Vec::new();
    if let Some(listener) = listeners.write {
        let addr = listener.local_addr()?;
        let writes = admin_http::serve(listener, admin::write_router(state), max, life.drain());
        tracing::info!(%addr, "admin writes (POST /counters/reset) served, token required");
        tasks.push(tokio::spawn(async move {
            writes.await;
            Ok(())
        }));
    }
    for listener in listeners.extra {
        let addr = listener.local_addr()?;
        let extra = admin_http::serve(listener, app.clone(), max, life.drain());
        tracing::info!(%addr, "admin endpoints also served");
        tasks.push(tokio::spawn(async move {
            extra.await;
            Ok(())
        }));
    }
    let http = admin_http::serve(listeners.http, app, max, life.drain());
    let deadline = life.deadline();
    tasks.push(tokio::spawn(async move {
        tokio::select! {
            () = http => Ok(()),
            _ = deadline => {
                tracing::warn!("HTTP requests still open after the grace period; stopping");
                Ok(())
            }
        }
    }));
    Ok(tasks)
}

async fn follow_readiness(
    store: Arc<AnyStore>,
    needs_config: Option<Arc<ArcSwap<Config>>>,
    shutdown: Shutdown,
    ready: Arc<AtomicBool>,
    reporter: tonic_health::server::HealthReporter,
    metrics: Arc<Metrics>,
) {
    let mut shown: Option<bool> = None;
    let mut store_was: Option<bool> = None;
    loop {
        let store_up = store.is_ready();
        // The store logs its own changes (one line naming the node and the cause): a change
        // of readiness it caused is not logged again here.
        let store_changed = store_was.is_some_and(|was| was != store_up);
        store_was = Some(store_up);
        metrics.store_up.set(i64::from(store_up));
        let has_config = needs_config
            .as_ref()
            .is_none_or(|c| !c.load().domains.is_empty());
        let now_ready = store_up && has_config && !shutdown.is_triggered();
        if shown != Some(now_ready) {
            let status = if now_ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            for name in HEALTH_SERVICES {
                reporter.set_service_status(name, status).await;
            }
            ready.store(now_ready, Ordering::SeqCst);
            metrics.ready.set(i64::from(now_ready));
            match store.reason().filter(|_| !now_ready) {
                _ if store_changed => tracing::debug!(ready = now_ready, "readiness changed"),
                Some(reason) => tracing::warn!(ready = now_ready, %reason, "readiness changed"),
                None if !has_config => {
                    tracing::info!(
                        ready = now_ready,
                        "readiness changed: no config with a domain yet"
                    )
                }
                None => tracing::info!(ready = now_ready, "readiness changed"),
            }
            shown = Some(now_ready);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = shutdown.wait(), if !shutdown.is_triggered() => {}
        }
    }
}

async fn upkeep(store: Arc<AnyStore>, shutdown: Shutdown) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => store.maintain().await,
            _ = shutdown.wait() => return,
        }
    }
}
