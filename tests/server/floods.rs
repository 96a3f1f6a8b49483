//! Floods of clients that never finish (issue 48): connections to the admin port that send half
//! a request's header, or trickle it a byte a second, and connections to the gRPC port that send
//! half of HTTP/2's preface, are cut off within the bound (10 s, plus a margin here); past
//! `--admin-max-connections` / `--grpc-max-connections` a connection is closed at once; the
//! server answers everyone else meanwhile, and its memory comes back down. The real binary
//! runs, so its RSS is its own.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::binary::Binary;
use crate::support::server::{http_client, TempConfig};

const YAML: &str = "domain: floods\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n";

/// The bound the server promises (10 s) plus slack for a loaded 2-core box.
const CUT_WITHIN: Duration = Duration::from_secs(14);

pub(crate) fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Reads until the peer closes (or resets); `false` when it is still open at `until`.
pub(crate) fn closed_by(mut s: &TcpStream, until: Instant) -> bool {
    let mut buf = [0u8; 512];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Sends a request (HTTP/1.1 for the admin port, HTTP/2's preface and SETTINGS for gRPC) and
/// waits up to 5 s for the first bytes of the answer: the server has taken the connection.
fn answered(mut s: &TcpStream, grpc: bool) -> bool {
    let request: &[u8] = if grpc {
        // The preface, then an empty SETTINGS frame (length 0, type 4, flags 0, stream 0).
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0"
    } else {
        b"GET /healthz HTTP/1.1\r\nHost: tollgate\r\n\r\n"
    };
    if s.write_all(request).is_err() {
        return false;
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 512];
    matches!(s.read(&mut buf), Ok(n) if n > 0)
}

pub(crate) async fn healthz(bin: &Binary) -> bool {
    http_client()
        .get(format!("{}/healthz", bin.http_url))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_finish_are_cut_off_and_the_rest_are_served() {
    let config = TempConfig::new(YAML);
    let bin = Binary::serve(config.path(), &[], None).await;
    let pid = bin.child.id();
    let (admin, grpc) = (port_of(&bin.http_url), port_of(&bin.grpc_url));
    let before = rss_kib(pid);
    // Below --admin-max-connections (256 by default): past it the port refuses until they are cut.
    let n = 200;
    let started = Instant::now();
    let flood = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        for _ in 0..n {
            let mut a = TcpStream::connect(("127.0.0.1", admin)).unwrap();
            a.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Half: ")
                .unwrap();
            held.push(a);
            let mut g = TcpStream::connect(("127.0.0.1", grpc)).unwrap();
            g.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
            held.push(g);
        }
        held
    });
    // One client trickling a header a byte a second.
    let trickle = tokio::task::spawn_blocking(move || {
        let mut t = TcpStream::connect(("127.0.0.1", admin)).unwrap();
        let start = Instant::now();
        for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if t.write_all(&[*b]).is_err() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        None
    });
    let held = flood.await.unwrap();
    let during = rss_kib(pid);
    assert!(
        healthz(&bin).await,
        "the admin port still answers during the flood"
    );
    let mut client = tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient::connect(
        bin.grpc_url.clone(),
    )
    .await
    .expect("a gRPC client connects during the flood");
    let answer = client
        .should_rate_limit(crate::support::server::req("floods", &[&[("k", "v")]]))
        .await
        .expect("a gRPC call is answered during the flood");
    assert_eq!(answer.into_inner().overall_code, 1);
    let until = started + CUT_WITHIN;
    let open =
        tokio::task::spawn_blocking(move || held.iter().filter(|s| !closed_by(s, until)).count())
            .await
            .unwrap();
    let cut_after = started.elapsed();
    assert_eq!(
        open,
        0,
        "{open} of {} flood connections still open after {cut_after:?}",
        2 * n
    );
    let trickled = trickle.await.unwrap();
    assert!(
        trickled.is_some_and(|t| t <= CUT_WITHIN),
        "a client trickling a byte a second was not cut off: {trickled:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(pid);
    println!(
        "flood: {n} half headers + {n} half prefaces; RSS {before} KiB before, {during} KiB \
         during, {after} KiB after; all cut within {cut_after:?}; the trickler after {trickled:?}"
    );
    assert!(healthz(&bin).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_caps_a_connection_is_closed_at_once() {
    let config = TempConfig::new(YAML);
    let bin = Binary::serve(
        config.path(),
        &[
            "--admin-max-connections",
            "4",
            "--grpc-max-connections",
            "4",
        ],
        None,
    )
    .await;
    let (admin, grpc) = (port_of(&bin.http_url), port_of(&bin.grpc_url));
    tokio::task::spawn_blocking(move || {
        for port in [admin, grpc] {
            // Each of the four is answered before the fifth connects, so the acceptor has
            // taken all four (a fixed sleep was not enough on a busy CI box).
            let held: Vec<TcpStream> = (0..4)
                .map(|_| {
                    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    assert!(
                        answered(&s, port == grpc),
                        "port {port}: a connection within the cap was not served"
                    );
                    s
                })
                .collect();
            let extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
            assert!(
                closed_by(&extra, Instant::now() + Duration::from_secs(5)),
                "port {port}: a fifth connection was kept"
            );
            for s in &held {
                assert!(
                    !closed_by(s, Instant::now() + Duration::from_millis(100)),
                    "port {port}: a connection within the cap was closed"
                );
            }
            drop(held);
            std::thread::sleep(Duration::from_millis(300));
        }
    })
    .await
    .unwrap();
    // The places came back: the server answers again on both ports.
    assert!(
        healthz(&bin).await,
        "the admin port answers once the held ones closed"
    );
    let mut client = tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient::connect(
        bin.grpc_url.clone(),
    )
    .await
    .expect("a gRPC client connects once the held ones closed");
    assert!(client
        .should_rate_limit(crate::support::server::req("floods", &[&[("k", "v")]]))
        .await
        .is_ok());
}
