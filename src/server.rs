//! Starts and stops tollgate: the gRPC server (rate limit service + `grpc.health.v1`), the
//! HTTP admin server, and the background tasks (readiness, config reload, store upkeep).
//!
//! Readiness is one fact shown three ways (gRPC health for `""`, `ratelimit` and the RLS
//! service name; `/readyz`; `/healthcheck`): the store is ready and we are not shutting down.
//! On shutdown readiness drops first, then after `drain_delay` the listeners stop accepting
//! and in-flight calls finish.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::ServingStatus;

use crate::admin::{self, AdminState};
use crate::config::{compile_sources, read_sources, LoadOptions, ReloadStatus, Reloader};
use crate::metrics::Metrics;
use crate::pb::rls::rate_limit_service_server::RateLimitServiceServer;
use crate::service::{GrpcService, RateLimiter};
use crate::settings::Settings;
use crate::shutdown::Shutdown;
use crate::store::Store;

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
    pub config_path: PathBuf,
    pub load: LoadOptions,
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
}

/// A started server.
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub shutdown: Shutdown,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    /// Waits until both servers have stopped (after a shutdown trigger).
    pub async fn wait(self) -> anyhow::Result<()> {
        for t in self.tasks {
            t.await.context("server task panicked")??;
        }
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
pub async fn start<S: Store>(
    opts: ServerOptions,
    store: Arc<S>,
    shutdown: Shutdown,
) -> anyhow::Result<Running> {
    let sources = read_sources(&opts.config_path)?;
    let config = Arc::new(ArcSwap::from_pointee(compile_sources(&sources, opts.load)?));
    let metrics = opts.metrics.clone();
    let limiter = Arc::new(RateLimiter::new(
        config.clone(),
        store.clone(),
        opts.settings.clone(),
        metrics.clone(),
    ));

    let grpc_listener = TcpListener::bind(opts.grpc_addr)
        .await
        .with_context(|| format!("cannot listen for gRPC on {}", opts.grpc_addr))?;
    let http_listener = TcpListener::bind(opts.http_addr)
        .await
        .with_context(|| format!("cannot listen for HTTP on {}", opts.http_addr))?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;

    let (reporter, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_SERVICES {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    let ready = Arc::new(AtomicBool::new(false));
    tokio::spawn(follow_readiness(
        store.clone(),
        shutdown.clone(),
        ready.clone(),
        reporter,
        metrics.clone(),
    ));
    let reload_status = Arc::new(ReloadStatus::new(metrics.clone()));
    reload_status.loaded();
    if let Some(every) = opts.reload_interval {
        let reloader = Reloader {
            path: opts.config_path.clone(),
            load: opts.load,
            config: config.clone(),
            status: reload_status.clone(),
            every,
        };
        tokio::spawn(reloader.run(sources, shutdown.clone()));
    }
    // Readiness must reflect the store before the first probe of `follow_readiness`.
    store.maintain().await;
    tokio::spawn(upkeep(store.clone(), shutdown.clone()));

    let drain = {
        let shutdown = shutdown.clone();
        let delay = opts.drain_delay;
        move || {
            let shutdown = shutdown.clone();
            async move {
                shutdown.wait().await;
                tokio::time::sleep(delay).await;
            }
        }
    };
    let grpc = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(GrpcService(limiter.clone())))
        .serve_with_incoming_shutdown(TcpListenerStream::new(grpc_listener), drain());
    let app = admin::router(Arc::new(AdminState {
        limiter,
        config,
        reload_status,
        ready,
    }));
    let http = axum::serve(http_listener, app).with_graceful_shutdown(drain());
    tracing::info!(%grpc_addr, %http_addr, "tollgate serving");
    let deadline = {
        let shutdown = shutdown.clone();
        let limit = opts.drain_delay + opts.shutdown_grace;
        move || {
            let shutdown = shutdown.clone();
            async move {
                shutdown.wait().await;
                tokio::time::sleep(limit).await;
            }
        }
    };
    let (grpc_deadline, http_deadline) = (deadline(), deadline());
    let tasks = vec![
        tokio::spawn(async move {
            tokio::select! {
                r = grpc => r.context("gRPC server failed"),
                _ = grpc_deadline => {
                    tracing::warn!("gRPC calls still open after the grace period; stopping");
                    Ok(())
                }
            }
        }),
        tokio::spawn(async move {
            tokio::select! {
                r = http => r.context("HTTP server failed"),
                _ = http_deadline => {
                    tracing::warn!("HTTP requests still open after the grace period; stopping");
                    Ok(())
                }
            }
        }),
    ];
    Ok(Running {
        grpc_addr,
        http_addr,
        shutdown,
        tasks,
    })
}

async fn follow_readiness<S: Store>(
    store: Arc<S>,
    shutdown: Shutdown,
    ready: Arc<AtomicBool>,
    reporter: tonic_health::server::HealthReporter,
    metrics: Arc<Metrics>,
) {
    let mut shown: Option<bool> = None;
    loop {
        let store_up = store.is_ready();
        metrics.store_up.set(i64::from(store_up));
        let now_ready = store_up && !shutdown.is_triggered();
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
                Some(reason) => tracing::warn!(ready = now_ready, %reason, "readiness changed"),
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

async fn upkeep<S: Store>(store: Arc<S>, shutdown: Shutdown) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => store.maintain().await,
            _ = shutdown.wait() => return,
        }
    }
}
