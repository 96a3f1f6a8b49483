//! gRPC connections, from accepted socket to closed: TLS (and client certificates), HTTP/2
//! (hyper), keepalive pings, a maximum age after which a connection closes gracefully (so
//! clients reconnect and spread over new replicas), and a graceful close on shutdown.
//!
//! A serving thread ([`crate::serve::threads`]) runs [`serve`] over the connections it is given;
//! each connection's calls go to [`crate::serve::grpc::Calls`].

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::base::pem::{certs, private_key};
use crate::serve::grpc::{CallBody, Calls};
use crate::serve::threads::Accepted;
use crate::store::Store;

/// How long a client may take to finish its TLS handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// How long a client may take, after connecting (and its TLS handshake), to send HTTP/2's
/// 24-byte connection preface: a client that sends part of it, or trickles it, is cut off.
pub const PREFACE: Duration = Duration::from_secs(10);

/// After an idle connection's GOAWAY, how long the peer has to close it before it is closed.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// HTTP/2's connection preface, `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`: 24 bytes.
const PREFACE_LEN: usize = 24;

/// `--grpc-max-connections`'s default.
pub const MAX_CONNECTIONS: usize = 10_000;

/// `--grpc-max-concurrent-streams`'s default (hyper's, said out loud): calls open at once on
/// one connection; a stream past it is refused (`RST_STREAM` `REFUSED_STREAM`).
pub const MAX_CONCURRENT_STREAMS: u32 = 200;

/// `--grpc-max-connection-idle`'s default: a connection with no call open, and none started,
/// for this long is closed gracefully (`GOAWAY`).
pub const MAX_CONNECTION_IDLE: Duration = Duration::from_secs(3600);

/// How the gRPC listener treats connections.
#[derive(Debug, Clone)]
pub struct Transport {
    /// HTTP/2 PING interval on idle connections (and how long to wait for the answer).
    pub keepalive: Option<(Duration, Duration)>,
    /// Close connections gracefully after this long, so clients rebalance onto new replicas.
    pub max_connection_age: Option<Duration>,
    /// After `max_connection_age`, how long open calls may take before the connection closes.
    pub max_connection_age_grace: Option<Duration>,
    /// Server TLS (and mutual TLS with a client CA).
    pub tls: Option<GrpcTls>,
    /// Open connections at most (`--grpc-max-connections`).
    pub max_connections: usize,
    /// Calls open at once on one connection (`--grpc-max-concurrent-streams`).
    pub max_concurrent_streams: u32,
    /// Close a connection without an open call for this long (`--grpc-max-connection-idle`).
    pub max_connection_idle: Option<Duration>,
}

impl Default for Transport {
    fn default() -> Transport {
        Transport {
            keepalive: None,
            max_connection_age: None,
            max_connection_age_grace: None,
            tls: None,
            max_connections: MAX_CONNECTIONS,
            max_concurrent_streams: MAX_CONCURRENT_STREAMS,
            max_connection_idle: Some(MAX_CONNECTION_IDLE),
        }
    }
}

/// PEM files for the gRPC server's TLS.
#[derive(Debug, Clone)]
pub struct GrpcTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate signed by this CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

impl GrpcTls {
    /// A TLS acceptor offering HTTP/2 (ALPN `h2`), requiring a client certificate signed by
    /// `client_ca` when there is one.
    fn acceptor(&self) -> anyhow::Result<TlsAcceptor> {
        use rustls::server::WebPkiClientVerifier;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certs(&self.cert).context("--grpc-tls-cert")?;
        let key = private_key(&self.key).context("--grpc-tls-key")?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("gRPC TLS")?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in certs(ca).context("--grpc-client-ca")? {
                    roots
                        .add(cert)
                        .with_context(|| format!("--grpc-client-ca {}", ca.display()))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .context("--grpc-client-ca")?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .context("--grpc-tls-cert and --grpc-tls-key do not make a usable identity")?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// What every connection of the listener shares.
#[derive(Clone)]
pub struct Connections {
    http2: http2::Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    max_age: Option<Duration>,
    max_age_grace: Option<Duration>,
    max_idle: Option<Duration>,
}

impl Connections {
    pub fn new(t: &Transport) -> anyhow::Result<Connections> {
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(t.max_concurrent_streams);
        if let Some((every, wait)) = t.keepalive {
            http2.keep_alive_interval(every).keep_alive_timeout(wait);
        }
        Ok(Connections {
            http2,
            tls: t.tls.as_ref().map(GrpcTls::acceptor).transpose()?,
            max_age: t.max_connection_age,
            max_age_grace: t.max_connection_age_grace,
            max_idle: t.max_connection_idle,
        })
    }
}

/// Serves every connection `accepted` yields until it ends or `stop_accepting` resolves, then
/// closes the open ones gracefully (in-flight calls finish) and returns once they are closed.
pub async fn serve<S: Store>(
    mut accepted: Accepted,
    calls: Calls<S>,
    connections: Connections,
    stop_accepting: impl Future<Output = ()>,
) {
    let (closing, closing_rx) = watch::channel(false);
    let connections = Arc::new(connections);
    let mut open = JoinSet::new();
    tokio::pin!(stop_accepting);
    loop {
        tokio::select! {
            conn = accepted.next() => match conn {
                Some(Ok((tcp, permit))) => {
                    let conn = connection(tcp, calls.clone(), connections.clone(), closing_rx.clone());
                    open.spawn(async move {
                        conn.await;
                        drop(permit);
                    });
                }
                Some(Err(e)) => tracing::warn!(error = %e, "a gRPC connection could not be set up"),
                None => break,
            },
            _ = &mut stop_accepting => break,
            Some(_) = open.join_next(), if !open.is_empty() => {}
        }
    }
    let _ = closing.send(true);
    while open.join_next().await.is_some() {}
}

/// One connection: the TLS handshake when configured, then HTTP/2 until it closes.
async fn connection<S: Store>(
    tcp: TcpStream,
    calls: Calls<S>,
    connections: Arc<Connections>,
    closing: watch::Receiver<bool>,
) {
    match &connections.tls {
        None => http2_connection(tcp, calls, &connections, closing).await,
        Some(acceptor) => match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => http2_connection(tls, calls, &connections, closing).await,
            Ok(Err(e)) => tracing::debug!(error = %e, "gRPC TLS handshake failed"),
            Err(_) => tracing::debug!("gRPC TLS handshake timed out"),
        },
    }
}

async fn http2_connection<S, IO>(
    io: IO,
    calls: Calls<S>,
    connections: &Connections,
    mut closing: watch::Receiver<bool>,
) where
    S: Store,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (io, read) = Counted::new(io);
    let activity = Arc::new(Activity::new());
    let calls = Tracked {
        calls,
        activity: activity.clone(),
    };
    let conn = connections.http2.serve_connection(TokioIo::new(io), calls);
    tokio::pin!(conn);
    let started = activity.started;
    let preface_by = started + PREFACE;
    // `select!` checks a branch's condition only when it is entered: the preface's timer stays
    // armed until it fires, and then looks whether the preface came.
    let mut preface_pending = true;
    let far = started + Duration::from_secs(365 * 24 * 3600);
    let mut idle_check = connections.max_idle.map_or(far, |idle| started + idle);
    let aged_at = connections.max_age.map_or(far, |age| Instant::now() + age);
    // Set once the connection is told to close: by shutdown, or by age (then with a limit).
    let mut closing_since: Option<Instant> = None;
    let mut forced_at = far;
    let mut idle_closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "gRPC connection ended with an error");
                }
                return;
            }
            _ = closing.wait_for(|&c| c), if closing_since.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing_since = Some(Instant::now());
            }
            _ = tokio::time::sleep_until(aged_at), if closing_since.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing_since = Some(Instant::now());
                if let Some(grace) = connections.max_age_grace {
                    forced_at = Instant::now() + grace;
                }
            }
            _ = tokio::time::sleep_until(forced_at), if closing_since.is_some() => {
                // After an idle GOAWAY, a call that started as it left finishes first, and
                // its last frames get a second to leave.
                let settled = activity
                    .idle_since()
                    .is_some_and(|since| since + Duration::from_secs(1) <= Instant::now());
                if !idle_closing || settled {
                    return;
                }
                forced_at = Instant::now() + Duration::from_secs(1);
            }
            _ = tokio::time::sleep_until(idle_check), if closing_since.is_none() && connections.max_idle.is_some() => {
                let idle = connections.max_idle.unwrap_or(Duration::MAX);
                match activity.idle_since() {
                    Some(since) if since + idle <= Instant::now() => {
                        tracing::debug!("gRPC connection closed: no call for {idle:?}");
                        conn.as_mut().graceful_shutdown();
                        closing_since = Some(Instant::now());
                        // A peer that never answers the GOAWAY's PING would hold it open.
                        idle_closing = true;
                        forced_at = Instant::now() + IDLE_CLOSE_GRACE;
                    }
                    Some(since) => idle_check = since + idle,
                    // A call is open: look again one idle period from now.
                    None => idle_check = Instant::now() + idle,
                }
            }
            _ = tokio::time::sleep_until(preface_by), if preface_pending => {
                if read.load(Ordering::Relaxed) < PREFACE_LEN {
                    tracing::debug!("gRPC connection closed: no HTTP/2 preface within {PREFACE:?}");
                    return;
                }
                preface_pending = false;
            }
        }
    }
}

/// A connection's calls: how many are open, and when the last one ended.
struct Activity {
    started: Instant,
    open: AtomicUsize,
    /// When the last call ended, in milliseconds since the connection started (0: none yet).
    last_ended_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: Instant::now(),
            open: AtomicUsize::new(0),
            last_ended_ms: AtomicU64::new(0),
        }
    }

    /// Since when the connection has had no open call; `None` while one is open.
    fn idle_since(&self) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let ms = self.last_ended_ms.load(Ordering::Acquire);
        Some(self.started + Duration::from_millis(ms))
    }
}

/// Ends a call in [`Activity`] when dropped (answered, or abandoned by the client).
struct CallOpen {
    activity: Arc<Activity>,
}

impl Drop for CallOpen {
    fn drop(&mut self) {
        let ms = self.activity.started.elapsed().as_millis() as u64;
        self.activity.last_ended_ms.fetch_max(ms, Ordering::AcqRel);
        self.activity.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// [`Calls`] that keep a connection's [`Activity`]: a call is open from its request until
/// hyper drops its response body (its last frame sent, or the stream reset).
struct Tracked<S> {
    calls: Calls<S>,
    activity: Arc<Activity>,
}

impl<S: Store> hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Tracked<S> {
    type Response = hyper::Response<TrackedBody>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn call(&self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        self.activity.open.fetch_add(1, Ordering::AcqRel);
        let open = CallOpen {
            activity: self.activity.clone(),
        };
        let call = hyper::service::Service::call(&self.calls, req);
        Box::pin(async move {
            let answer = call.await?;
            Ok(answer.map(|body| TrackedBody { body, _open: open }))
        })
    }
}

/// A response body that holds its call open until it is dropped.
pub struct TrackedBody {
    body: CallBody,
    _open: CallOpen,
}

impl hyper::body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket that counts the bytes read from it (up to the preface's length).
struct Counted<IO> {
    io: IO,
    read: Arc<AtomicUsize>,
}

impl<IO> Counted<IO> {
    fn new(io: IO) -> (Counted<IO>, Arc<AtomicUsize>) {
        let read = Arc::new(AtomicUsize::new(0));
        (
            Counted {
                io,
                read: read.clone(),
            },
            read,
        )
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let got = buf.filled().len() - before;
        if got > 0 && self.read.load(Ordering::Relaxed) < PREFACE_LEN {
            self.read.fetch_add(got, Ordering::Relaxed);
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
