//! A control plane for the xDS config source: an aggregated discovery service (state of the
//! world) serving `RateLimitConfig` resources as Envoy Gateway's does: every stream gets the
//! current snapshot when it opens and each new one as it is set; an ACK or NACK is recorded,
//! never answered (a NACKed snapshot is not resent). Plaintext, TLS or mutual TLS. It runs on
//! a runtime of its own, so [`ControlPlane::kill`] closes every socket at once, as a crash does,
//! and [`ControlPlane::restart`] comes back on the same port.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use prost::Message;
use tokio::sync::{watch, Notify};
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::StreamExt;
use tollgate::pb::ads::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use tollgate::pb::ads::{DiscoveryRequest, DiscoveryResponse};
use tollgate::pb::rls_conf::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

/// The resource type tollgate asks for.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// One published state of the world.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub version: String,
    pub resources: Vec<prost_types::Any>,
    /// When the control plane published it (for the propagation measurements).
    pub at: std::time::Instant,
}

/// A request as the control plane received it, with the stream's gRPC metadata.
#[derive(Clone, Debug)]
pub struct Received {
    pub request: DiscoveryRequest,
    pub headers: Vec<(String, String)>,
    /// When the control plane received it (for the propagation measurements).
    pub at: std::time::Instant,
}

impl Received {
    /// An ACK of `version`.
    pub fn acks(&self, version: &str) -> bool {
        self.request.error_detail.is_none()
            && self.request.version_info == version
            && !self.request.response_nonce.is_empty()
    }

    /// A NACK (its message).
    pub fn nack(&self) -> Option<&str> {
        self.request
            .error_detail
            .as_ref()
            .map(|s| s.message.as_str())
    }
}

#[derive(Default)]
struct Log {
    received: Mutex<Vec<Received>>,
    changed: Notify,
}

/// TLS for the control plane's listener: its certificate, and a CA clients must chain to.
pub struct PlaneTls {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub client_ca: Option<Vec<u8>>,
}

/// A running (or killed) control plane.
pub struct ControlPlane {
    pub addr: SocketAddr,
    tls: Option<Arc<PlaneTls>>,
    snapshot: Arc<watch::Sender<Option<Snapshot>>>,
    log: Arc<Log>,
    runtime: Option<tokio::runtime::Runtime>,
    nonce: Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.kill();
    }
}

impl ControlPlane {
    /// Starts on a free loopback port, with no snapshot.
    pub fn start(tls: Option<PlaneTls>) -> ControlPlane {
        let port = super::server::free_port();
        let mut plane = ControlPlane {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            tls: tls.map(Arc::new),
            snapshot: Arc::new(watch::channel(None).0),
            log: Arc::default(),
            runtime: None,
            nonce: Arc::default(),
        };
        plane.restart();
        plane
    }

    /// Publishes a snapshot to every open stream, and to every stream opened later.
    pub fn set(&self, version: &str, configs: Vec<RateLimitConfig>) -> Snapshot {
        self.set_any(version, configs.iter().map(any).collect())
    }

    /// Publishes raw resources (any type URL).
    pub fn set_any(&self, version: &str, resources: Vec<prost_types::Any>) -> Snapshot {
        let snapshot = Snapshot {
            version: version.to_string(),
            resources,
            at: std::time::Instant::now(),
        };
        self.snapshot.send_replace(Some(snapshot.clone()));
        snapshot
    }

    /// Closes the listener and every stream at once (the runtime is dropped).
    pub fn kill(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    /// Listens again on the same port (after [`kill`](Self::kill)), serving the last snapshot.
    pub fn restart(&mut self) {
        self.kill();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("control plane runtime");
        let service = Ads {
            snapshot: self.snapshot.clone(),
            log: self.log.clone(),
            nonce: self.nonce.clone(),
        };
        let addr = self.addr;
        let tls = self.tls.clone();
        // The old listener's port may linger for a moment after a kill.
        let mut bound = None;
        for _ in 0..100 {
            if let Ok(l) = std::net::TcpListener::bind(addr) {
                bound = Some(l);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let listener = bound.unwrap_or_else(|| panic!("control plane: cannot bind {addr}"));
        listener.set_nonblocking(true).expect("nonblocking");
        let listener = {
            let _entered = rt.enter();
            tokio::net::TcpListener::from_std(listener).expect("listener")
        };
        rt.spawn(async move {
            let mut server = Server::builder();
            if let Some(tls) = tls {
                let mut config =
                    ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert, &tls.key));
                if let Some(ca) = &tls.client_ca {
                    config = config.client_ca_root(Certificate::from_pem(ca));
                }
                server = server.tls_config(config).expect("control plane TLS");
            }
            let _ = server
                .add_service(
                    AggregatedDiscoveryServiceServer::new(service)
                        .max_decoding_message_size(64 << 20)
                        .max_encoding_message_size(64 << 20),
                )
                .serve_with_incoming(TcpListenerStream::new(listener).map(|s| {
                    // As go-control-plane's (Go's) sockets: a response's last segment is not
                    // held back (Nagle) for the ACK of the ones before it.
                    if let Ok(s) = &s {
                        let _ = s.set_nodelay(true);
                    }
                    s
                }))
                .await;
        });
        self.runtime = Some(rt);
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.log.received.lock().expect("log").clone()
    }

    /// Waits (up to `within`) for a request `matches` accepts, among those received from
    /// `from` on (an index into [`received`](Self::received)); panics naming `what` when none comes.
    pub async fn wait_for(
        &self,
        what: &str,
        from: usize,
        within: Duration,
        matches: impl Fn(&Received) -> bool,
    ) -> Received {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let changed = self.log.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(r) = self.received().into_iter().skip(from).find(|r| matches(r)) {
                return r;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!(
                    "the control plane never received {what} within {within:?}; it received: {:#?}",
                    self.received()
                        .iter()
                        .map(|r| (&r.request.version_info, &r.request.response_nonce, r.nack()))
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    /// The ACK of `version` (received from index `from` on) within `within`, or what the
    /// control plane received instead: for a caller that adds what it knows to the failure.
    pub async fn ack_within(
        &self,
        version: &str,
        from: usize,
        within: Duration,
    ) -> Result<Received, String> {
        let wait = self.wait_for("", from, within + Duration::from_secs(1), |r| {
            r.acks(version)
        });
        match tokio::time::timeout(within, wait).await {
            Ok(r) => Ok(r),
            Err(_) => Err(format!(
                "the control plane never received an ACK of version {version} within {within:?}; \
                 it received (version, nonce, NACK): {:?}",
                self.received()
                    .iter()
                    .map(|r| (&r.request.version_info, &r.request.response_nonce, r.nack()))
                    .collect::<Vec<_>>()
            )),
        }
    }

    /// Waits for the ACK of `version` (received from index `from` on).
    pub async fn wait_ack(&self, version: &str, from: usize) -> Received {
        self.wait_for(
            &format!("an ACK of version {version}"),
            from,
            Duration::from_secs(15),
            |r| r.acks(version),
        )
        .await
    }

    /// Waits for a NACK (received from index `from` on).
    pub async fn wait_nack(&self, from: usize) -> Received {
        self.wait_for("a NACK", from, Duration::from_secs(15), |r| {
            r.nack().is_some()
        })
        .await
    }
}

struct Ads {
    snapshot: Arc<watch::Sender<Option<Snapshot>>>,
    log: Arc<Log>,
    nonce: Arc<std::sync::atomic::AtomicU64>,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let headers: Vec<(String, String)> = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.to_string(), v.to_str().ok()?.to_string()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        let mut incoming = request.into_inner();
        let log = self.log.clone();
        let mut snapshots = self.snapshot.subscribe();
        let nonce = self.nonce.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            // Nothing is sent before the client's first request (as go-control-plane waits
            // for the watch it opens).
            let mut first = true;
            let mut sent: Option<String> = None;
            loop {
                tokio::select! {
                    message = incoming.next() => {
                        let Some(Ok(request)) = message else { return };
                        log.received.lock().expect("log").push(Received {
                            request,
                            headers: headers.clone(),
                            at: std::time::Instant::now(),
                        });
                        log.changed.notify_waiters();
                        if !first {
                            continue;
                        }
                        first = false;
                    }
                    changed = snapshots.changed(), if !first => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
                let current = snapshots.borrow_and_update().clone();
                let Some(snapshot) = current else { continue };
                if sent.as_deref() == Some(snapshot.version.as_str()) {
                    continue;
                }
                sent = Some(snapshot.version.clone());
                let n = nonce.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let response = DiscoveryResponse {
                    version_info: snapshot.version.clone(),
                    resources: snapshot.resources.clone(),
                    type_url: TYPE_URL.into(),
                    nonce: n.to_string(),
                    ..Default::default()
                };
                if tx.send(Ok(response)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// A resource as the control plane sends it.
pub fn any(config: &RateLimitConfig) -> prost_types::Any {
    prost_types::Any {
        type_url: TYPE_URL.into(),
        value: config.encode_to_vec(),
    }
}

/// A domain's resource, named after the domain as Envoy Gateway names them.
pub fn domain(name: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: name.into(),
        descriptors,
    }
}

/// A descriptor entry with a limit (`unit`: 1 second, 2 minute, 3 hour, 4 day).
pub fn limit(key: &str, value: &str, unit: i32, per_unit: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        rate_limit: Some(RateLimitPolicy {
            unit,
            requests_per_unit: per_unit,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A descriptor entry without a limit of its own, with nested entries.
pub fn nest(key: &str, value: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        descriptors,
        ..Default::default()
    }
}

/// Units of `RateLimitPolicy`.
pub const MINUTE: i32 = 2;
pub const HOUR: i32 = 3;
