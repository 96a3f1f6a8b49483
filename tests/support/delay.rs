//! A Redis (or any TCP server) far away: a proxy on loopback that delays every byte by a
//! one-way delay in each direction, and holds every byte while cut (a partition TCP
//! survives: what was sent arrives after the heal). Used for a region far from home
//! (`tests/server/global_regions.rs`) and a Redis 30 ms away (`tests/server/busy_host.rs`).
//! Runs on a thread and a runtime of its own (a fixture shared by a binary's tests outlives
//! the test that made it), until it is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy: connect to `ip:port` to reach the server `one_way` away.
pub struct DelayProxy {
    pub port: u16,
    /// While set, nothing crosses in either direction.
    pub cut: Arc<AtomicBool>,
    /// Dropped with the proxy: its runtime, and every connection, ends.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl DelayProxy {
    /// Listens on `ip` (a port of its own) and forwards to `127.0.0.1:to`, `one_way` late.
    pub async fn start(ip: &str, to: u16, one_way: Duration) -> DelayProxy {
        let std_listener = std::net::TcpListener::bind((ip, 0)).expect("bind the proxy");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let port = std_listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let c = cut.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("listener");
                let accept = async {
                    while let Ok((inbound, _)) = listener.accept().await {
                        let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)).await else {
                            continue;
                        };
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        let (ri, wi) = inbound.into_split();
                        let (ro, wo) = outbound.into_split();
                        tokio::spawn(pump(ri, wo, c.clone(), one_way));
                        tokio::spawn(pump(ro, wi, c.clone(), one_way));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        DelayProxy {
            port,
            cut,
            _stop: stop,
        }
    }
}

/// Copies `from` to `to`, each chunk sent `one_way` after it was read, and none while cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
    one_way: Duration,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((read_at, bytes)) = rx.recv().await {
            let due = read_at + one_way;
            loop {
                let now = Instant::now();
                if !cut.load(Ordering::SeqCst) && now >= due {
                    break;
                }
                let wait = due
                    .saturating_duration_since(now)
                    .max(Duration::from_millis(1));
                tokio::time::sleep(wait.min(Duration::from_millis(5))).await;
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}
