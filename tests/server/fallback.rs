//! `--failure-mode local` with a real Redis paused under load: while Redis cannot answer,
//! an in-process limiter decides with each limit shared out among the replicas, marked in the
//! dynamic metadata; as soon as Redis is ready again, it decides again.

use std::sync::Arc;
use std::time::Duration;

use prost_types::value::Kind;
use tokio::time::Instant;
use tollgate::base::clock::SystemClock;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitResponse;
use tollgate::service::settings::{FailureMode, Settings};
use tollgate::store::redis::options::ClockSource;
use tollgate::store::redis::RedisStore;

use crate::support::binary::Binary;
use crate::support::kit::RedisSetup;
use crate::support::redis::RedisServer;
use crate::support::server::*;

const CONFIG: &str = "\
domain: f
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
";

fn marker(resp: &RateLimitResponse) -> Option<String> {
    resp.dynamic_metadata
        .as_ref()
        .and_then(|m| m.fields.get("tollgate.store_failure"))
        .and_then(|v| match &v.kind {
            Some(Kind::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
}

/// A Redis store on `redis` with Redis's clock and a 50 ms deadline.
fn store(redis: &RedisServer) -> Arc<RedisStore> {
    let mut setup = RedisSetup::new(redis.url(), &tollgate::base::clock::ManualClock::new(0));
    setup.clock = ClockSource::Redis;
    setup.wall = Arc::new(SystemClock);
    setup.timeout = Duration::from_millis(50);
    Arc::new(setup.connect())
}

async fn metrics(server: &TestServer) -> String {
    http_client()
        .get(server.http_url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body")
}

async fn wait_readyz(server: &TestServer, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = http_client()
            .get(server.http_url("/readyz"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        if status == want {
            return;
        }
        assert!(Instant::now() < deadline, "/readyz never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_is_stood_in_for_by_a_shared_out_local_limiter() {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let store = store(&redis);
    let settings = Settings {
        failure_mode: FailureMode::Local,
        local_fallback_share: 2,
        ..Settings::default()
    };
    let server = start_with_store(CONFIG, settings.into(), store).await;
    let mut client = server.client().await;
    let a = || req("f", &[&[("a", "x")]]);
    for left in [9, 8, 7] {
        let resp = call(&mut client, a()).await;
        assert_eq!(
            (resp.statuses[0].limit_remaining, marker(&resp)),
            (left, None)
        );
    }

    let pid = redis.pid().expect("redis runs") as i32;
    // SAFETY: signalling the test's own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_readyz(&server, 503).await;
    // The local limiter: 10 / 2 replicas = 5 an hour on this instance.
    let mut codes = Vec::new();
    for _ in 0..6 {
        let resp = call(&mut client, a()).await;
        assert_eq!(marker(&resp).as_deref(), Some("local"), "{resp:?}");
        assert_eq!(
            resp.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit),
            Some(5)
        );
        codes.push(resp.overall_code);
    }
    assert_eq!(codes, [OK, OK, OK, OK, OK, OVER_LIMIT]);
    let metrics = metrics(&server).await;
    assert!(
        metrics.lines().any(|l| l
            .starts_with("tollgate_store_failures_total{policy=\"local\",cause=\"timeout\"} 6")),
        "{metrics}"
    );
    // A limit of 0 (deny everything) stays 0 when shared out.
    let resp = call(&mut client, req("f", &[&[("blocked", "x")]])).await;
    assert_eq!(marker(&resp).as_deref(), Some("local"), "{resp:?}");
    assert_eq!(resp.overall_code, OVER_LIMIT, "{resp:?}");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    wait_readyz(&server, 200).await;
    let resp = call(&mut client, a()).await;
    assert_eq!(marker(&resp), None, "Redis decides again: {resp:?}");
    assert_eq!(resp.statuses[0].limit_remaining, 6);
    server.stop().await;
}

/// `--max-store-bytes` bounds the local stand-in too: past it, its entries closest to expiry
/// are evicted (and counted), as in the memory store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_stand_in_holds_at_most_max_store_bytes() {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let store = store(&redis);
    let settings = Settings {
        failure_mode: FailureMode::Local,
        max_store_bytes: 1,
        ..Settings::default()
    };
    let server = start_with_store(CONFIG, settings.into(), store).await;
    let mut client = server.client().await;
    let pid = redis.pid().expect("redis runs") as i32;
    // SAFETY: signalling the test's own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_readyz(&server, 503).await;
    for i in 0..200 {
        let value = format!("v{i}");
        let resp = call(&mut client, req("f", &[&[("a", value.as_str())]])).await;
        assert_eq!(marker(&resp).as_deref(), Some("local"), "{resp:?}");
    }
    let metrics = metrics(&server).await;
    let evicted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_memory_evictions_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(evicted > 0.0, "no evictions within 1 byte:\n{metrics}");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    server.stop().await;
}

/// With nothing listening on Redis's port, every place that says why names the same cause:
/// `/readyz`, the failure policy's log line and the metric's `cause` label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_redis_is_named_refused_everywhere() {
    let config = TempConfig::new(CONFIG);
    let closed = free_port();
    let log = config.dir.join("tollgate.log");
    let redis = format!("redis://127.0.0.1:{closed}");
    let binary = Binary::serve(
        config.path(),
        &["--redis-url", &redis, "--failure-mode", "allow"],
        Some(log),
    )
    .await;
    let refused = format!("redis 127.0.0.1:{closed}: connection refused");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = http_client()
            .get(format!("{}/readyz", binary.http_url))
            .send()
            .await
            .expect("/readyz")
            .text()
            .await
            .expect("body");
        if body.contains(&refused) {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz says {body:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = RateLimitServiceClient::new(
        channel(
            format!("127.0.0.1:{}", binary.grpc_port())
                .parse()
                .expect("addr"),
        )
        .await,
    );
    let resp = call(&mut client, req("f", &[&[("a", "x")]])).await;
    assert_eq!(resp.overall_code, OK, "--failure-mode allow answers");
    let text = http_client()
        .get(format!("{}/metrics", binary.http_url))
        .send()
        .await
        .expect("/metrics")
        .text()
        .await
        .expect("body");
    assert!(
        text.lines()
            .any(|l| l == "tollgate_store_failures_total{policy=\"allow\",cause=\"refused\"} 1")
            // The old name, kept for one release.
            && text
                .lines()
                .any(|l| l == "tollgate_store_failures_total{policy=\"allow\",cause=\"connection\"} 1"),
        "{text}"
    );
    let logged = binary.log();
    let line = logged
        .lines()
        .find(|l| l.contains("store failed"))
        .unwrap_or_else(|| panic!("no store failure logged:\n{logged}"));
    assert!(line.contains(&refused), "{line}");
    assert!(line.contains("cause=\"refused\""), "{line}");
}
