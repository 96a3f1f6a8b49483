//! Limits enforced through Envoy on every store: the headers Envoy builds from tollgate's
//! statuses, tollgate's own headers on the 429, hierarchical and shared limits decided as one,
//! gRPC callers getting `RESOURCE_EXHAUSTED`, and no failed request across tollgate's
//! connection-age GOAWAYs under load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::time::Instant;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::fixture::{exclusive, fixture, unique, Side};
use crate::support::envoy::Backend;
use crate::support::kit::avoid_window_edge;
use crate::support::server::http_client;

const HOUR: Duration = Duration::from_secs(3600);

/// The fixture's limits are per hour: keep a test's requests inside one hour.
pub async fn within_one_hour() {
    avoid_window_edge(HOUR, Duration::from_secs(30)).await;
}

/// `GET url` with `headers`; the status and the response headers.
pub async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, HeaderMap) {
    let mut req = http_client().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (resp.status().as_u16(), resp.headers().clone())
}

pub fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_and_envoy_builds_the_rate_limit_headers() {
    let fx = fixture().await;
    within_one_hour().await;
    for side in &fx.sides {
        let tenant = unique("tenant");
        for (i, left) in ["2", "1", "0"].into_iter().enumerate() {
            let id = unique("req");
            let (status, h) = get(
                &side.url("/enforce"),
                &[("x-tenant", &tenant), ("x-test-id", &id)],
            )
            .await;
            assert_eq!(
                status,
                200,
                "[{}] request {} of 3: {h:?}",
                side.name(),
                i + 1
            );
            assert!(
                Backend::get().saw(&id),
                "[{}] the backend saw it",
                side.name()
            );
            // Envoy's DRAFT_VERSION_03 headers, built from the status with least remaining
            // (its current_limit: the limit, its window and its name).
            assert_eq!(
                header(&h, "x-ratelimit-limit"),
                Some("3, 3;w=3600;name=\"per-tenant\""),
                "[{}] {h:?}",
                side.name()
            );
            assert_eq!(
                header(&h, "x-ratelimit-remaining"),
                Some(left),
                "[{}]",
                side.name()
            );
            let reset: u64 = header(&h, "x-ratelimit-reset")
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("[{}] x-ratelimit-reset: {h:?}", side.name()));
            assert!(
                (1..=3600).contains(&reset),
                "[{}] reset {reset}",
                side.name()
            );
        }
        let id = unique("req");
        let (status, h) = get(
            &side.url("/enforce"),
            &[("x-tenant", &tenant), ("x-test-id", &id)],
        )
        .await;
        assert_eq!(status, 429, "[{}] the fourth request: {h:?}", side.name());
        assert!(
            !Backend::get().saw(&id),
            "[{}] a 429 never reaches the backend",
            side.name()
        );
        assert_eq!(
            header(&h, "x-envoy-ratelimited"),
            Some("true"),
            "[{}] {h:?}",
            side.name()
        );
        assert_eq!(
            header(&h, "x-ratelimit-remaining"),
            Some("0"),
            "[{}]",
            side.name()
        );
        // tollgate's --response-headers reach the 429: Retry-After is the honest wait (the
        // end of the hour), as is Envoy's own reset.
        let retry: u64 = header(&h, "retry-after")
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("[{}] Retry-After on the 429: {h:?}", side.name()));
        let reset: u64 = header(&h, "x-ratelimit-reset")
            .and_then(|r| r.parse().ok())
            .unwrap_or_default();
        assert!(
            (1..=3600).contains(&retry),
            "[{}] retry-after {retry}",
            side.name()
        );
        assert!(
            retry.abs_diff(reset) <= 1,
            "[{}] {retry} vs {reset}",
            side.name()
        );
        assert_eq!(
            header(&h, "ratelimit-remaining"),
            Some("0"),
            "[{}] {h:?}",
            side.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_and_a_limit_shared_by_every_tenant_decide_as_one() {
    let fx = fixture().await;
    within_one_hour().await;
    for side in &fx.sides {
        // Per user 2, per org 3 (hierarchical), 5 shared by every org of the scope.
        let scope = unique("scope");
        let ask = |org: &'static str, user: &'static str| {
            let scope = scope.clone();
            async move {
                get(
                    &side.url("/hier"),
                    &[("x-scope", &scope), ("x-org", org), ("x-user", user)],
                )
                .await
                .0
            }
        };
        let steps = [
            ("a", "u1", 200, "u1's first"),
            ("a", "u1", 200, "u1's second"),
            ("a", "u1", 429, "u1 is over per-user"),
            ("a", "u2", 200, "org a's third"),
            ("a", "u3", 429, "org a is over per-org although u3 has room"),
            ("b", "v1", 200, "org b's first (4 of the shared 5)"),
            (
                "b",
                "v2",
                200,
                "org b's second (5 of 5): the denials above charged nothing",
            ),
            (
                "b",
                "v3",
                429,
                "every org is over all-orgs although b and v3 have room",
            ),
        ];
        for (org, user, want, why) in steps {
            assert_eq!(ask(org, user).await, want, "[{}] {why}", side.name());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_callers_through_envoy_get_resource_exhausted() {
    let fx = fixture().await;
    within_one_hour().await;
    for side in &fx.sides {
        let channel = tonic::transport::Endpoint::from_shared(side.url(""))
            .expect("endpoint")
            .connect()
            .await
            .unwrap_or_else(|e| panic!("[{}] connect to Envoy: {e}", side.name()));
        let mut health = HealthClient::new(channel);
        let caller = unique("caller");
        let check = || {
            let mut req = tonic::Request::new(HealthCheckRequest {
                service: String::new(),
            });
            req.metadata_mut()
                .insert("x-caller", caller.parse().expect("ascii"));
            req
        };
        for i in 0..2 {
            let resp = health
                .check(check())
                .await
                .unwrap_or_else(|e| panic!("[{}] call {}: {e}", side.name(), i + 1));
            assert_eq!(resp.into_inner().status, ServingStatus::Serving as i32);
        }
        let err = health
            .check(check())
            .await
            .expect_err("the third call is over the limit");
        assert_eq!(
            err.code(),
            tonic::Code::ResourceExhausted,
            "[{}] {err:?}",
            side.name()
        );
    }
}

/// Requests through `side` from `workers` loops for `run`: (answered 200, any other answer).
async fn load(side: &Side, workers: usize, run: Duration) -> (u64, Vec<String>) {
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(std::sync::Mutex::new(Vec::new()));
    let until = Instant::now() + run;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (ok, bad) = (ok.clone(), bad.clone());
        let url = side.url("/load");
        let key = unique(&format!("load{w}"));
        tasks.push(tokio::spawn(async move {
            let client = http_client();
            while Instant::now() < until {
                match client.get(&url).header("x-load", &key).send().await {
                    Ok(r) if r.status() == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => bad
                        .lock()
                        .expect("lock")
                        .push(format!("HTTP {}", r.status())),
                    Err(e) => bad.lock().expect("lock").push(e.to_string()),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("load worker");
    }
    let bad = bad.lock().expect("lock").clone();
    (ok.load(Ordering::Relaxed), bad)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_fails_across_connection_age_goaways_under_load() {
    let fx = fixture().await;
    let _alone = exclusive().await;
    for side in &fx.sides {
        let connections = format!("cluster.{}.upstream_cx_total", side.rls_cluster);
        let before = fx.envoy.counter(&connections).await;
        let errors = format!("cluster.{}.ratelimit.error", side.backend_cluster);
        let errors_before = fx.envoy.counter(&errors).await;
        // tollgate closes each connection after 1 s (--grpc-max-connection-age 1s).
        let (ok, bad) = load(side, 16, Duration::from_millis(3500)).await;
        let opened = fx.envoy.counter(&connections).await - before;
        let failed_calls = fx.envoy.counter(&errors).await - errors_before;
        assert!(bad.is_empty(), "[{}] failed requests: {bad:?}", side.name());
        assert!(ok > 200, "[{}] only {ok} requests in 3.5 s", side.name());
        assert!(
            opened >= 2,
            "[{}] Envoy opened {opened} connections to tollgate in 3.5 s: no GOAWAY happened",
            side.name()
        );
        assert_eq!(
            failed_calls,
            0,
            "[{}] Envoy's calls to tollgate failed",
            side.name()
        );
    }
}
