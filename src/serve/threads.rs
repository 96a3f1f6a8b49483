//! Serving threads: the gRPC connections are served by one single-threaded runtime per core.
//!
//! One acceptor hands each new connection to the next thread in turn; the connection then
//! lives on that thread for good. Every HTTP/2 stream of a connection (hyper spawns one task
//! per call) runs on the thread that reads and writes its socket, so a call wakes no other
//! thread, and the answers of calls that finish together leave in one write instead of one
//! write each. On a shared work-stealing runtime, most answers woke the connection's task on
//! the other worker and went out alone (BENCHMARKS.md has the before and after).
//!
//! Everything else (admin HTTP, reloads, Redis upkeep) stays on the main runtime.

use std::future::Future;
use std::net::TcpStream as StdTcpStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use futures::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::base::log_throttle;

/// A connection handed to a serving thread, and its place under `--grpc-max-connections`
/// (given back when the connection is dropped).
pub type Handed = (StdTcpStream, OwnedSemaphorePermit);

/// The connections one serving thread is given, as tonic's `serve_with_incoming` wants them.
pub struct Accepted {
    rx: mpsc::UnboundedReceiver<Handed>,
}

impl Stream for Accepted {
    type Item = std::io::Result<(TcpStream, OwnedSemaphorePermit)>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Registered with this thread's reactor here, where the stream is polled.
        self.rx
            .poll_recv(cx)
            .map(|conn| conn.map(|(tcp, permit)| TcpStream::from_std(tcp).map(|tcp| (tcp, permit))))
    }
}

/// How many serving threads `requested` means: 0 is one per available core.
pub fn thread_count(requested: usize) -> usize {
    match requested {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Starts `threads` serving threads, each running `serve(incoming)` on a runtime of its own,
/// and an acceptor on the current runtime that deals `listener`'s connections out to them
/// (with `TCP_NODELAY`: without it an answer can wait for the client's delayed ACK) until
/// `stop_accepting` resolves, at most `max_connections` open at once (one more is closed as
/// soon as it is accepted). The returned task ends when every thread has.
pub fn start_threads<F, Fut>(
    listener: TcpListener,
    threads: usize,
    max_connections: usize,
    serve: F,
    stop_accepting: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>>
where
    F: Fn(Accepted) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = anyhow::Result<()>> + 'static,
{
    let mut senders = Vec::with_capacity(threads);
    let mut done = Vec::with_capacity(threads);
    for i in 0..threads {
        let (tx, rx) = mpsc::unbounded_channel();
        let (finished, finished_rx) = oneshot::channel();
        let serve = serve.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a serving thread's runtime")?;
        std::thread::Builder::new()
            .name(format!("tollgate-grpc-{i}"))
            .spawn(move || {
                let result = runtime.block_on(serve(Accepted { rx }));
                let _ = finished.send(result);
            })
            .context("cannot start a serving thread")?;
        senders.push(tx);
        done.push(finished_rx);
    }
    let permits = Arc::new(Semaphore::new(max_connections));
    tokio::spawn(accept(listener, senders, permits, stop_accepting));
    Ok(tokio::spawn(async move {
        for finished in done {
            finished.await.context("a serving thread panicked")??;
        }
        Ok(())
    }))
}

/// Deals connections out round-robin until `stop` resolves; dropping the senders then ends
/// every thread's `Accepted`.
async fn accept(
    listener: TcpListener,
    threads: Vec<mpsc::UnboundedSender<Handed>>,
    permits: Arc<Semaphore>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut next = 0;
    loop {
        let conn = tokio::select! {
            _ = &mut stop => return,
            conn = listener.accept() => conn,
        };
        let (conn, peer) = match conn {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: the listener itself is fine; wait a little.
                tracing::warn!(error = %e, "accepting a gRPC connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            if let Some(suppressed) = log_throttle::due("grpc_connections_full") {
                tracing::warn!(
                    %peer,
                    suppressed,
                    "gRPC connection closed: --grpc-max-connections reached"
                );
            }
            continue;
        };
        let handed = conn
            .set_nodelay(true)
            .and_then(|()| conn.into_std())
            .map(|c| threads[next % threads.len()].send((c, permit)));
        if let Err(e) = handed {
            tracing::warn!(error = %e, "could not hand a gRPC connection to a serving thread");
        }
        next += 1;
    }
}
