//! The admin HTTP listeners' connections (HTTP/1.1, hyper): at most `--admin-max-connections`
//! open at once per listener (one more is closed as soon as it is accepted), and a client must
//! send a request's whole header within [`HEADER_READ`] of starting it, or of the connection
//! going idle, or the connection is closed: a client trickling bytes, or sending half a header
//! and then a line now and then, holds nothing for long. Each request carries the peer's
//! address (`ConnectInfo`, logged with every reset). On shutdown the listener stops accepting
//! and open connections close once their requests are answered.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::base::log_throttle;

/// How long a client may take to send a request's header (from its first byte, or from the
/// connection's start or last answer).
pub const HEADER_READ: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `stop` resolves, then waits for open connections to finish
/// their requests.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    max_connections: usize,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(max_connections));
    let (closing, closing_rx) = watch::channel(false);
    let mut open = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            Some(_) = open.join_next(), if !open.is_empty() => continue,
            conn = listener.accept() => match conn {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an admin connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            if let Some(suppressed) = log_throttle::due("admin_connections_full") {
                tracing::warn!(
                    %peer,
                    max = max_connections,
                    suppressed,
                    "admin connection closed: --admin-max-connections reached"
                );
            }
            drop(tcp);
            continue;
        };
        let svc = app
            .clone()
            .map_request(move |mut req: axum::extract::Request<_>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            });
        let mut closing = closing_rx.clone();
        open.spawn(async move {
            let _permit = permit;
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ);
            let conn = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(svc));
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, %peer, "admin connection ended with an error");
                    }
                    return;
                }
                _ = closing.wait_for(|&c| c) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    let _ = closing.send(true);
    while open.join_next().await.is_some() {}
}
