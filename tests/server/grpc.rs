//! End-to-end tests of the server as Envoy and operators see it: the real server in-process
//! on real sockets, driven by the real tonic rate limit client, the gRPC health client and
//! HTTP; and the `tollgate` binary itself (`check-config`, `serve`, `query`, SIGTERM).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::server::*;
use tokio::process::Command;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tollgate::algorithm::rule::ChargeOutcome;
use tollgate::algorithm::rule::Mode;
use tollgate::base::clock::ManualClock;
use tollgate::pb::rls::rate_limit_response::rate_limit::Unit;
use tollgate::pb::rls::RateLimitResponse;
use tollgate::plan::Plan;
use tollgate::serve::HEALTH_SERVICES;
use tollgate::service::settings::{FailureMode, HeaderNames, Settings};
use tollgate::service::validate::Bounds;
use tollgate::store::error::StoreError;
use tollgate::store::error::{Cause, Connection};
use tollgate::store::memory::MemoryStore;
use tollgate::store::Store;
use tonic_health::pb::health_check_response::ServingStatus;

const CONFIG: &str = "\
domain: test
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
";

/// `CONFIG`'s `a` with another rate, for reload tests.
fn config_with_a(requests_per_unit: u32) -> String {
    format!(
        "domain: test\ndescriptors:\n  - key: a\n    rate_limit: {{unit: minute, requests_per_unit: {requests_per_unit}}}\n"
    )
}

fn header_map(resp: &RateLimitResponse) -> HashMap<String, String> {
    resp.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

/// The limit and remaining of a one-descriptor answer.
fn limit_and_remaining(resp: &RateLimitResponse) -> (u32, u32) {
    let s = &resp.statuses[0];
    let limit = s.current_limit.as_ref().expect("a current limit");
    (limit.requests_per_unit, s.limit_remaining)
}

// --- gRPC health and shutdown --------------------------------------------------------------

#[tokio::test]
async fn health_is_serving_under_every_service_name() {
    let server = start(CONFIG, Settings::default()).await;
    let mut health = server.health().await;
    for name in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        assert_eq!(
            health_status(&mut health, name)
                .await
                .expect("known service"),
            ServingStatus::Serving,
            "service '{name}'"
        );
    }
    let unknown = health_status(&mut health, "no.such.Service").await;
    assert_eq!(
        unknown.expect_err("unknown service").code(),
        tonic::Code::NotFound
    );
    server.stop().await;
}

#[tokio::test]
async fn shutdown_drops_readiness_first_then_stops_the_listeners() {
    let opts = TestOptions {
        drain_delay: Duration::from_secs(1),
        ..TestOptions::default()
    };
    let server = start(CONFIG, opts).await;
    let mut health = server.health().await;
    let mut client = server.client().await;
    let http = http_client();
    let (grpc_addr, http_addr) = (server.running.grpc_addr, server.running.http_addr);
    let readyz = server.http_url("/readyz");
    let healthcheck = server.http_url("/healthcheck");
    assert_eq!(http.get(&readyz).send().await.unwrap().status(), 200);

    server.running.shutdown.trigger();

    // During the drain: readiness is NOT_SERVING everywhere, calls are still answered.
    for name in HEALTH_SERVICES {
        wait_health(&mut health, name, ServingStatus::NotServing).await;
    }
    assert_eq!(http.get(&readyz).send().await.unwrap().status(), 503);
    assert_eq!(http.get(&healthcheck).send().await.unwrap().status(), 500);
    let resp = call(&mut client, req("test", &[&[("a", "drain")]])).await;
    assert_eq!(resp.overall_code, OK);

    // After the drain both servers stop, even with idle client connections still open.
    bounded("server wait", server.running.wait())
        .await
        .expect("clean stop");
    assert!(
        tokio::net::TcpStream::connect(grpc_addr).await.is_err(),
        "gRPC listener still accepts"
    );
    assert!(
        tokio::net::TcpStream::connect(http_addr).await.is_err(),
        "HTTP listener still accepts"
    );
}

/// A memory store that announces each call and holds it until the test opens the gate.
struct GatedStore {
    inner: MemoryStore,
    entered: Notify,
    gate: Semaphore,
}

impl Store for GatedStore {
    fn name(&self) -> &'static str {
        "gated"
    }

    async fn apply(&self, plan: &Plan<'_>, mode: Mode) -> Result<Vec<ChargeOutcome>, StoreError> {
        self.entered.notify_one();
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|e| StoreError::new("test", Cause::Script(e.to_string())))?;
        self.inner.apply(plan, mode).await
    }
}

#[tokio::test]
async fn shutdown_lets_in_flight_calls_finish() {
    let store = Arc::new(GatedStore {
        inner: MemoryStore::new(Arc::new(ManualClock::new(T0_US))),
        entered: Notify::new(),
        gate: Semaphore::new(0),
    });
    let server = start_with_store(CONFIG, TestOptions::default(), store.clone()).await;
    let mut client = server.client().await;
    let in_flight =
        tokio::spawn(async move { try_call(&mut client, req("test", &[&[("a", "x")]])).await });
    bounded("call reaches the store", store.entered.notified()).await;

    let grpc_addr = server.running.grpc_addr;
    server.running.shutdown.trigger();
    let waiting = tokio::spawn(server.running.wait());
    // Shutdown has got as far as closing the listener: new connections are refused.
    let deadline = Instant::now() + TIMEOUT;
    while tokio::net::TcpStream::connect(grpc_addr).await.is_ok() {
        assert!(Instant::now() < deadline, "listener still accepting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !waiting.is_finished(),
        "server stopped while a call was in flight"
    );

    store.gate.add_permits(1);
    let resp = bounded("in-flight call", in_flight)
        .await
        .expect("call task")
        .expect("in-flight call answered");
    assert_eq!(resp.overall_code, OK);
    assert_eq!(limit_and_remaining(&resp), (3, 2));
    bounded("server wait", waiting)
        .await
        .expect("wait task")
        .expect("clean stop");
}

/// gRPC clients with client-side health checking hold a Watch stream open; shutdown must
/// not wait on it forever.
#[tokio::test]
async fn health_watch_sees_not_serving_and_does_not_hold_shutdown() {
    let server = start(CONFIG, Settings::default()).await;
    let mut health = server.health().await;
    wait_health(&mut health, "ratelimit", ServingStatus::Serving).await;
    let mut watch = bounded(
        "health watch",
        health.watch(tonic_health::pb::HealthCheckRequest {
            service: "ratelimit".into(),
        }),
    )
    .await
    .expect("watch starts")
    .into_inner();
    let first = bounded("first watch message", watch.message())
        .await
        .expect("watch message")
        .expect("a status");
    assert_eq!(first.status(), ServingStatus::Serving);

    server.running.shutdown.trigger();
    let next = bounded("watch NOT_SERVING", watch.message())
        .await
        .expect("watch message")
        .expect("a status");
    assert_eq!(next.status(), ServingStatus::NotServing);
    bounded("server wait with a watch open", server.running.wait())
        .await
        .expect("clean stop");
}

// --- HTTP admin ----------------------------------------------------------------------------

#[tokio::test]
async fn http_health_endpoints_answer_ok() {
    let server = start(CONFIG, Settings::default()).await;
    let http = http_client();
    let resp = http
        .get(server.http_url("/healthcheck"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "OK");
    for path in ["/healthz", "/readyz"] {
        let resp = http.get(server.http_url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    server.stop().await;
}

#[tokio::test]
async fn http_rlconfig_lists_the_limits() {
    let server = start(CONFIG, Settings::default()).await;
    let resp = http_client()
        .get(server.http_url("/rlconfig"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    for line in [
        "test.a: unit=MINUTE requests_per_unit=3, shadow_mode: false",
        "test.b: unit=MINUTE requests_per_unit=1, shadow_mode: false",
        "test.c: unit=MINUTE requests_per_unit=100, shadow_mode: false",
        "test.free: unlimited",
    ] {
        assert!(text.lines().any(|l| l == line), "no '{line}' in:\n{text}");
    }
    // The same limits in their own terms; a query it does not know is refused, not ignored.
    let human = http_client()
        .get(server.http_url("/rlconfig?view=human"))
        .send()
        .await
        .unwrap();
    assert_eq!(human.status(), 200);
    let text = human.text().await.unwrap();
    for line in [
        "test.a: 3 per minute per a",
        "test.b: 1 per minute per b",
        "test.free: unlimited",
    ] {
        assert!(text.lines().any(|l| l == line), "no '{line}' in:\n{text}");
    }
    let bad = http_client()
        .get(server.http_url("/rlconfig?view=yaml"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    server.stop().await;
}

/// Test options with `POST /json` served (`--admin-json`).
fn json_on(settings: Settings) -> TestOptions {
    TestOptions {
        settings,
        admin_json: true,
        ..TestOptions::default()
    }
}

#[tokio::test]
async fn post_json_is_off_unless_enabled() {
    let server = start(CONFIG, Settings::default()).await;
    let resp = http_client()
        .post(server.http_url("/json"))
        .body(r#"{"domain":"test","descriptors":[{"entries":[{"key":"b","value":"x"}]}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.text().await.unwrap().contains("--admin-json"));
    // Nothing was charged: gRPC still sees the whole limit.
    let mut client = server.client().await;
    let resp = call(&mut client, req("test", &[&[("b", "x")]])).await;
    assert_eq!(resp.overall_code, OK);
    server.stop().await;
}

#[tokio::test]
async fn http_json_decides_like_grpc() {
    let server = start(CONFIG, json_on(Settings::default())).await;
    let http = http_client();
    let url = server.http_url("/json");
    let post = |body: &'static str| http.post(&url).body(body).send();
    let one_b = r#"{"domain":"test","descriptors":[{"entries":[{"key":"b","value":"json"}]}]}"#;

    let resp = post(one_b).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["overallCode"], "OK", "{body}");
    assert_eq!(body["statuses"][0]["code"], "OK", "{body}");
    assert_eq!(
        body["statuses"][0]["currentLimit"]["requestsPerUnit"], 1,
        "{body}"
    );
    assert_eq!(
        body["statuses"][0]["currentLimit"]["unit"], "MINUTE",
        "{body}"
    );

    let resp = post(one_b).await.unwrap();
    assert_eq!(resp.status(), 429);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["overallCode"], "OVER_LIMIT", "{body}");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT", "{body}");

    for bad in [
        r#"{"domain": "test", "descriptors": ["#,
        "not json",
        r#"{"domain":"","descriptors":[{"entries":[{"key":"a","value":"x"}]}]}"#,
        r#"{"descriptors":[{"entries":[{"key":"a","value":"x"}]}]}"#,
        r#"{"domain":"test","descriptors":[]}"#,
        r#"{"domain":"test","bogus":1,"descriptors":[{"entries":[{"key":"a","value":"x"}]}]}"#,
    ] {
        let resp = post(bad).await.unwrap();
        assert_eq!(resp.status(), 400, "{bad}");
        assert!(!resp.text().await.unwrap().is_empty(), "no message: {bad}");
    }
    server.stop().await;
}

// --- gRPC answers --------------------------------------------------------------------------

#[tokio::test]
async fn bad_requests_are_invalid_argument_and_charge_nothing() {
    let settings = Settings {
        bounds: Bounds {
            max_descriptors: 2,
            max_entries: 16,
            max_value_len: 16,
            ..Bounds::default()
        },
        ..Settings::default()
    };
    let server = start(CONFIG, settings).await;
    let mut client = server.client().await;
    let long = "x".repeat(17);
    let cases = [
        ("empty domain", req("", &[&[("a", "x")]]), "domain"),
        ("no descriptors", request("test", vec![]), "descriptor"),
        (
            "descriptor without entries",
            request("test", vec![descriptor(&[("a", "x")]), descriptor(&[])]),
            "descriptor 1",
        ),
        (
            "too many descriptors",
            req("test", &[&[("a", "x")], &[("a", "y")], &[("a", "z")]]),
            "3",
        ),
        (
            "value too long",
            req("test", &[&[("a", "x")], &[("a", &long)]]),
            "16",
        ),
        ("empty key", req("test", &[&[("", "x")]]), "key"),
        (
            "override with unit UNKNOWN",
            request(
                "test",
                vec![
                    descriptor(&[("a", "x")]),
                    with_override(descriptor(&[("a", "o")]), 5, Unit::Unknown as i32),
                ],
            ),
            "unit",
        ),
        (
            "override with an out-of-range unit",
            request(
                "test",
                vec![with_override(descriptor(&[("a", "o")]), 5, 99)],
            ),
            "unit",
        ),
        (
            "override of zero requests",
            request(
                "test",
                vec![with_override(
                    descriptor(&[("a", "o")]),
                    0,
                    Unit::Minute as i32,
                )],
            ),
            "requests_per_unit",
        ),
    ];
    for (what, request, needle) in cases {
        let message = call_invalid(&mut client, request).await;
        assert!(
            message.contains(needle),
            "{what}: message '{message}' does not mention '{needle}'"
        );
    }
    // None of the rejected requests charged `a=x`.
    let resp = call(&mut client, req("test", &[&[("a", "x")]])).await;
    assert_eq!(limit_and_remaining(&resp), (3, 2));
    server.stop().await;
}

#[tokio::test]
async fn statuses_are_index_aligned_with_descriptors() {
    let server = start(CONFIG, Settings::default()).await;
    let mut client = server.client().await;
    let descriptors = vec![
        descriptor(&[("b", "s")]),
        descriptor(&[("nothing", "z")]),
        descriptor(&[("a", "s")]),
        descriptor(&[("free", "x")]),
        with_override(descriptor(&[("c", "o")]), 42, Unit::Second as i32),
    ];
    let resp = call(&mut client, request("test", descriptors.clone())).await;
    assert_eq!(resp.overall_code, OK, "{resp:?}");
    let s = &resp.statuses;
    let limit = |i: usize| {
        s[i].current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit))
    };
    assert!(s.iter().all(|s| s.code == OK), "{resp:?}");
    assert_eq!(limit(0), Some((1, Unit::Minute as i32)));
    assert_eq!(s[0].limit_remaining, 0);
    assert_eq!(s[0].duration_until_reset.map(|d| d.seconds), Some(50));
    assert_eq!(limit(1), None, "no rule for 'nothing'");
    assert_eq!(limit(2), Some((3, Unit::Minute as i32)));
    assert_eq!(s[2].limit_remaining, 2);
    assert_eq!(limit(3), None, "unlimited");
    assert_eq!(s[3].limit_remaining, u32::MAX);
    assert_eq!(limit(4), Some((42, Unit::Second as i32)));
    assert_eq!(s[4].limit_remaining, 41);

    let resp = call(&mut client, request("test", descriptors)).await;
    assert_eq!(resp.overall_code, OVER_LIMIT, "{resp:?}");
    let codes: Vec<i32> = resp.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [OVER_LIMIT, OK, OK, OK, OK]);
    server.stop().await;
}

/// `a=x` (3/min) together with an exhausted `b=y` (1/min); returns what `a=x` has left after.
async fn charge_a_beside_an_exhausted_b(settings: Settings) -> u32 {
    let server = start(CONFIG, settings).await;
    let mut client = server.client().await;
    assert_eq!(
        call(&mut client, req("test", &[&[("b", "y")]]))
            .await
            .overall_code,
        OK
    );
    let resp = call(&mut client, req("test", &[&[("a", "x")], &[("b", "y")]])).await;
    assert_eq!(resp.overall_code, OVER_LIMIT, "{resp:?}");
    assert_eq!(resp.statuses[0].code, OK, "{resp:?}");
    assert_eq!(resp.statuses[1].code, OVER_LIMIT, "{resp:?}");
    let resp = call(&mut client, req("test", &[&[("a", "x")]])).await;
    assert_eq!(resp.overall_code, OK);
    server.stop().await;
    limit_and_remaining(&resp).1
}

#[tokio::test]
async fn a_denied_request_charges_nothing_by_default() {
    // Only the last call charged `a=x`.
    assert_eq!(charge_a_beside_an_exhausted_b(Settings::default()).await, 2);
}

#[tokio::test]
async fn count_rejected_charges_every_descriptor() {
    let settings = Settings {
        count_rejected: true,
        ..Settings::default()
    };
    // The denied call charged `a=x` too.
    assert_eq!(charge_a_beside_an_exhausted_b(settings).await, 1);
}

#[tokio::test]
async fn response_headers_describe_the_deciding_limit() {
    let settings = Settings {
        headers: Some(HeaderNames::default()),
        ..Settings::default()
    };
    let server = start(CONFIG, settings).await;
    let mut client = server.client().await;

    let resp = call(&mut client, req("test", &[&[("a", "h")], &[("b", "h")]])).await;
    assert_eq!(resp.overall_code, OK);
    let h = header_map(&resp);
    assert_eq!(h.get("RateLimit-Limit").map(String::as_str), Some("1"));
    assert_eq!(h.get("RateLimit-Remaining").map(String::as_str), Some("0"));
    assert_eq!(h.get("RateLimit-Reset").map(String::as_str), Some("50"));
    assert!(!h.contains_key("Retry-After"), "{h:?}");

    let resp = call(&mut client, req("test", &[&[("b", "h")]])).await;
    assert_eq!(resp.overall_code, OVER_LIMIT);
    let h = header_map(&resp);
    assert_eq!(h.get("RateLimit-Limit").map(String::as_str), Some("1"));
    assert_eq!(h.get("RateLimit-Remaining").map(String::as_str), Some("0"));
    assert!(h.contains_key("RateLimit-Reset"), "{h:?}");
    assert_eq!(h.get("Retry-After").map(String::as_str), Some("50"));
    server.stop().await;
}

#[tokio::test]
async fn response_headers_are_off_by_default() {
    let server = start(CONFIG, Settings::default()).await;
    let mut client = server.client().await;
    for _ in 0..2 {
        let resp = call(&mut client, req("test", &[&[("b", "h")]])).await;
        assert!(resp.response_headers_to_add.is_empty(), "{resp:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn dynamic_metadata_only_when_enabled() {
    for enabled in [false, true] {
        let settings = Settings {
            dynamic_metadata: enabled,
            ..Settings::default()
        };
        let server = start(CONFIG, settings).await;
        let mut client = server.client().await;
        let resp = call(&mut client, req("test", &[&[("a", "m")], &[("b", "m")]])).await;
        match (enabled, &resp.dynamic_metadata) {
            (false, None) => {}
            (true, Some(md)) => {
                use prost_types::value::Kind;
                assert_eq!(
                    md.fields.get("domain").and_then(|v| v.kind.clone()),
                    Some(Kind::StringValue("test".into())),
                    "{md:?}"
                );
                match md.fields.get("descriptors").and_then(|v| v.kind.as_ref()) {
                    Some(Kind::ListValue(l)) => assert_eq!(l.values.len(), 2, "{md:?}"),
                    other => panic!("descriptors: {other:?}"),
                }
            }
            (enabled, md) => panic!("dynamic_metadata {enabled}: got {md:?}"),
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn global_shadow_mode_reports_over_limit_but_answers_ok() {
    let settings = Settings {
        global_shadow: true,
        ..Settings::default()
    };
    let server = start(CONFIG, json_on(settings)).await;
    let mut client = server.client().await;
    let first = call(&mut client, req("test", &[&[("b", "s")]])).await;
    assert_eq!(first.overall_code, OK);
    let second = call(&mut client, req("test", &[&[("b", "s")]])).await;
    assert_eq!(second.overall_code, OK, "{second:?}");
    assert_eq!(second.statuses[0].code, OVER_LIMIT, "{second:?}");

    let resp = http_client()
        .post(server.http_url("/json"))
        .body(r#"{"domain":"test","descriptors":[{"entries":[{"key":"b","value":"s"}]}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    server.stop().await;
}

/// A store whose backend is down.
struct DownStore;

impl Store for DownStore {
    fn name(&self) -> &'static str {
        "down"
    }

    async fn apply(&self, _: &Plan<'_>, _: Mode) -> Result<Vec<ChargeOutcome>, StoreError> {
        Err(StoreError::new(
            "redis 127.0.0.1:1",
            Cause::Connection(Connection::Refused),
        ))
    }
}

#[tokio::test]
async fn a_store_outage_follows_the_failure_mode() {
    let limited_and_not = || req("test", &[&[("a", "x")], &[("nothing", "z")]]);
    let json = r#"{"domain":"test","descriptors":[{"entries":[{"key":"a","value":"x"}]}]}"#;
    for mode in [
        FailureMode::Error,
        FailureMode::Allow,
        FailureMode::Deny,
        FailureMode::Local,
    ] {
        let settings = Settings {
            failure_mode: mode,
            ..Settings::default()
        };
        let server = start_with_store(CONFIG, json_on(settings), Arc::new(DownStore)).await;
        let mut client = server.client().await;
        // Nothing to charge: the store is not asked.
        let resp = call(&mut client, req("test", &[&[("nothing", "z")]])).await;
        assert_eq!(resp.overall_code, OK, "{mode:?}");

        let http_status = http_client()
            .post(server.http_url("/json"))
            .body(json)
            .send()
            .await
            .unwrap()
            .status();
        match mode {
            FailureMode::Error => {
                let status = try_call(&mut client, limited_and_not())
                    .await
                    .expect_err("UNAVAILABLE");
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(
                    status.message().contains("connection refused"),
                    "{status:?}"
                );
                assert_eq!(http_status, 503);
            }
            FailureMode::Allow | FailureMode::Deny | FailureMode::Local => {
                let resp = call(&mut client, limited_and_not()).await;
                let (overall, first, name, http) = match mode {
                    FailureMode::Allow => (OK, OK, "allow", 200),
                    FailureMode::Deny => (OVER_LIMIT, OVER_LIMIT, "deny", 429),
                    // The in-process limiter counts: 2 of `a`'s 3 left after /json's call.
                    _ => (OK, OK, "local", 200),
                };
                assert_eq!(resp.overall_code, overall, "{mode:?}: {resp:?}");
                let codes: Vec<i32> = resp.statuses.iter().map(|s| s.code).collect();
                assert_eq!(codes, [first, OK], "{mode:?}");
                // The marker is in the dynamic metadata (for Envoy's access log), not in
                // headers the end client sees.
                assert!(!header_map(&resp).contains_key("x-tollgate-store-failure"));
                let marker = resp
                    .dynamic_metadata
                    .as_ref()
                    .and_then(|m| m.fields.get("tollgate.store_failure"))
                    .and_then(|v| match &v.kind {
                        Some(prost_types::value::Kind::StringValue(s)) => Some(s.as_str()),
                        _ => None,
                    });
                assert_eq!(marker, Some(name), "{mode:?}: {resp:?}");
                assert_eq!(http_status, http, "{mode:?}");
            }
        }
        server.stop().await;
    }
}

// --- Config reload -------------------------------------------------------------------------

/// The reload generation and last rejection, from `/rlconfig`'s headers.
async fn config_generation(server: &TestServer) -> (u64, Option<String>) {
    let resp = http_client()
        .get(server.http_url("/rlconfig"))
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let generation = header("x-tollgate-config-generation")
        .and_then(|g| g.parse().ok())
        .expect("generation header");
    (generation, header("x-tollgate-config-error"))
}

/// Waits until a reload attempt after generation `before` has happened; returns its error.
async fn wait_for_generation_after(server: &TestServer, before: u64) -> Option<String> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (generation, error) = config_generation(server).await;
        if generation > before {
            return error;
        }
        assert!(
            Instant::now() < deadline,
            "no reload attempt after {before}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls with fresh `a` values (so nothing runs out) until `a`'s limit is `want`.
async fn wait_for_limit_of_a(server: &TestServer, want: u32) {
    let mut client = server.client().await;
    let deadline = Instant::now() + TIMEOUT;
    for i in 0.. {
        let value = format!("poll-{want}-{i}");
        let resp = call(&mut client, req("test", &[&[("a", &value)]])).await;
        let limit = resp.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit);
        if limit == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "limit of a still {limit:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn config_reload_applies_good_files_and_keeps_the_running_config_on_bad_ones() {
    let opts = TestOptions {
        reload_interval: Some(Duration::from_millis(200)),
        ..TestOptions::default()
    };
    let server = start(&config_with_a(3), opts).await;
    let mut client = server.client().await;
    let resp = call(&mut client, req("test", &[&[("a", "x")]])).await;
    assert_eq!(limit_and_remaining(&resp), (3, 2));

    server.config.write(&config_with_a(7));
    wait_for_limit_of_a(&server, 7).await;
    let rlconfig = http_client()
        .get(server.http_url("/rlconfig"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        rlconfig.contains("test.a: unit=MINUTE requests_per_unit=7"),
        "{rlconfig}"
    );

    for bad in [
        "domain: test\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
        "domain: test\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requestsperunit: 1}\n",
        "domain: test\ndescriptors: [\n",
    ] {
        let (before, _) = config_generation(&server).await;
        server.config.write(bad);
        // The reloader has read the bad file once the generation moves on.
        let error = wait_for_generation_after(&server, before).await;
        assert!(
            error.as_deref().is_some_and(|e| e.contains("ratelimit.yaml")),
            "no rejection reported for:\n{bad}\ngot {error:?}"
        );
        let resp = call(&mut client, req("test", &[&[("a", "after-bad")]])).await;
        assert_eq!(
            resp.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit),
            Some(7),
            "after writing:\n{bad}"
        );
    }

    // The reloader is still alive after rejecting.
    server.config.write(&config_with_a(9));
    wait_for_limit_of_a(&server, 9).await;
    server.stop().await;
}

/// A config file that could not be read for a moment (removed, then put back unchanged) is
/// reported while it is missing, and no longer once it reads as the running config again.
#[tokio::test]
async fn a_config_read_that_failed_once_is_not_reported_forever() {
    let opts = TestOptions {
        reload_interval: Some(Duration::from_millis(100)),
        ..TestOptions::default()
    };
    let server = start(&config_with_a(3), opts).await;
    let (before, _) = config_generation(&server).await;
    std::fs::remove_file(server.config.path()).expect("remove the config");
    let error = wait_for_generation_after(&server, before).await;
    assert!(error.is_some(), "a missing file is a failed reload");
    server.config.write(&config_with_a(3));
    let deadline = Instant::now() + TIMEOUT;
    while config_generation(&server).await.1.is_some() {
        assert!(
            Instant::now() < deadline,
            "the failed read is still reported after the file came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // It stays clear on later rounds.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(config_generation(&server).await.1, None);
    let mut client = server.client().await;
    let resp = call(&mut client, req("test", &[&[("a", "x")]])).await;
    assert_eq!(limit_and_remaining(&resp), (3, 2));
    server.stop().await;
}

/// A config directory emptied by a deploy (its files removed before the new ones arrive)
/// keeps the running limits; the new files, once there, are applied.
#[tokio::test]
async fn an_emptied_config_directory_keeps_the_running_limits() {
    let opts = TestOptions {
        reload_interval: Some(Duration::from_millis(100)),
        config_dir: true,
        ..TestOptions::default()
    };
    let server = start(&config_with_a(3), opts).await;
    let (before, _) = config_generation(&server).await;
    std::fs::remove_file(server.config.path()).expect("empty the directory");
    let error = wait_for_generation_after(&server, before).await;
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("no domain found")),
        "{error:?}"
    );
    let mut client = server.client().await;
    let resp = call(&mut client, req("test", &[&[("a", "x")]])).await;
    assert_eq!(
        limit_and_remaining(&resp),
        (3, 2),
        "the running limits stay"
    );
    server.config.write(&config_with_a(7));
    wait_for_limit_of_a(&server, 7).await;
    assert_eq!(config_generation(&server).await.1, None);
    server.stop().await;
}

// --- Concurrency ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_clients_get_exactly_the_limit() {
    const TASKS: usize = 64;
    const EACH: usize = 4;
    let server = start(CONFIG, Settings::default()).await;
    let mut tasks = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let mut ok = 0usize;
            for _ in 0..EACH {
                let resp = call(&mut client, req("test", &[&[("c", "shared")]])).await;
                if resp.overall_code == OK {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += bounded("client task", t).await.expect("client task");
    }
    assert_eq!(ok, 100, "OK answers out of {}", TASKS * EACH);
    let mut client = server.client().await;
    let resp = call(&mut client, req("test", &[&[("c", "shared")]])).await;
    assert_eq!(resp.overall_code, OVER_LIMIT);
    assert_eq!(limit_and_remaining(&resp), (100, 0));
    server.stop().await;
}

// --- The binary ----------------------------------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ratelimit.yaml");

/// Runs the binary to completion (bounded) and returns (success, stdout, stderr).
async fn run_bin(args: &[&str]) -> (bool, String, String) {
    let (code, stdout, stderr) = run_bin_code(args).await;
    (code == Some(0), stdout, stderr)
}

/// Runs the binary; its exit code, stdout and stderr.
async fn run_bin_code(args: &[&str]) -> (Option<i32>, String, String) {
    let out = bounded(
        &format!("tollgate {args:?}"),
        Command::new(BIN).args(args).kill_on_drop(true).output(),
    )
    .await
    .expect("run tollgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn check_config_refuses_a_directory_without_a_domain() {
    let config = TempConfig::new("domain: x\n");
    std::fs::remove_file(config.path()).expect("empty the directory");
    std::fs::write(config.dir.join("notes.txt"), "not yaml").expect("write");
    let dir = config.dir.display().to_string();
    let (code, _, stderr) = run_bin_code(&["check-config", &dir]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("no domain found in {dir}")),
        "{stderr}"
    );
}

#[tokio::test]
async fn check_config_prints_the_limits() {
    let (ok, stdout, stderr) = run_bin(&["check-config", EXAMPLE]).await;
    assert!(ok, "stderr: {stderr}");
    for line in [
        "edge.api_key (per-api-key): 10 per minute per api_key",
        "edge.api_key_internal: unlimited",
        "edge.remote_address: 5 per second per remote_address",
        "edge.user.method_POST: 3 per minute for method=POST",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no '{line}' in:\n{stdout}"
        );
    }
    // --dump: envoyproxy/ratelimit's lines, as /rlconfig serves them.
    let (ok, stdout, stderr) = run_bin(&["check-config", "--dump", EXAMPLE]).await;
    assert!(ok, "stderr: {stderr}");
    for line in [
        "edge.api_key: unit=MINUTE requests_per_unit=10, shadow_mode: false, name: per-api-key",
        "edge.api_key_internal: unlimited",
        "edge.remote_address: unit=SECOND requests_per_unit=5, shadow_mode: false",
        "edge.user.method_POST: unit=MINUTE requests_per_unit=3, shadow_mode: false",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no '{line}' in:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn check_config_names_the_file_and_line_of_an_error() {
    let cases = [
        (
            "domain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requestsperunit: 3\n",
            "line 6",
            "requestsperunit",
        ),
        (
            "domain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: lots\n",
            "line 6",
            "requests_per_unit",
        ),
        (
            "domain: test\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minnute\n      requests_per_unit: 3\n",
            "line 5",
            "invalid rate limit unit 'minnute'; expected second, minute, hour, day, week, month or year",
        ),
    ];
    for (yaml, line, what) in cases {
        let config = TempConfig::new(yaml);
        let path = config.path().to_str().expect("utf-8 temp path");
        let (ok, _, stderr) = run_bin(&["check-config", path]).await;
        assert!(!ok, "accepted:\n{yaml}");
        assert!(
            stderr.contains(&format!("{path}: {line}:")),
            "no '{path}: {line}:' in: {stderr}"
        );
        assert!(stderr.contains(what), "no '{what}' in: {stderr}");
    }
}

/// Kills the child if the test fails before it exits.
struct ChildGuard(tokio::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.start_kill();
    }
}

/// Waits, if needed, so that the next few seconds stay within one wall-clock minute.
async fn avoid_minute_boundary() {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if secs % 60 >= 55 {
        tokio::time::sleep(Duration::from_secs(60 - secs % 60)).await;
    }
}

#[tokio::test]
async fn serve_answers_queries_and_exits_cleanly_on_sigterm() {
    let (grpc_port, http_port) = (free_port(), free_port());
    let grpc_addr = format!("127.0.0.1:{grpc_port}");
    let http_addr = format!("127.0.0.1:{http_port}");
    let child = Command::new(BIN)
        .args([
            "serve",
            "--config",
            EXAMPLE,
            "--grpc-addr",
            &grpc_addr,
            "--http-addr",
            &http_addr,
        ])
        .env("TOLLGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start tollgate serve");
    let mut child = ChildGuard(child);
    let pid = child.0.id().expect("child pid");

    let http = http_client();
    let url = format!("http://{http_addr}/healthcheck");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(resp) = http.get(&url).send().await {
            if resp.status() == 200 {
                break;
            }
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("tollgate serve exited early: {status}");
        }
        assert!(Instant::now() < deadline, "/healthcheck never answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    avoid_minute_boundary().await;
    let addr = format!("http://{grpc_addr}");
    let query = [
        "query",
        "--addr",
        &addr,
        "--domain",
        "edge",
        "--descriptor",
        "api_key=abc",
    ];
    for remaining in [9, 8] {
        let (ok, stdout, stderr) = run_bin(&query).await;
        assert!(ok, "query failed: {stderr}");
        assert!(stdout.starts_with("overall: OK\n"), "{stdout}");
        assert!(stdout.contains("limit 10/minute (per-api-key)"), "{stdout}");
        assert!(
            stdout.contains(&format!("remaining {remaining}")),
            "want remaining {remaining}:\n{stdout}"
        );
    }

    // For scripts: proto3 JSON, exit 0 for OK and 3 for OVER_LIMIT; ';hits=0' charges nothing.
    let json_query = |descriptor: &'static str| {
        let addr = addr.clone();
        async move {
            run_bin_code(&[
                "query",
                "--addr",
                &addr,
                "--domain",
                "edge",
                "--descriptor",
                descriptor,
                "--json",
            ])
            .await
        }
    };
    let (code, stdout, stderr) = json_query("api_key=abc;hits=0").await;
    assert_eq!(code, Some(0), "{stderr}");
    let answer: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(answer["overallCode"], "OK", "{stdout}");
    assert_eq!(answer["statuses"][0]["limitRemaining"], 8, "{stdout}");
    assert_eq!(
        answer["statuses"][0]["currentLimit"]["requestsPerUnit"], 10,
        "{stdout}"
    );
    let (code, _, stderr) = json_query("api_key=abc;hits=8").await;
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, stderr) = json_query("api_key=abc;hits=0").await;
    assert_eq!(code, Some(3), "{stdout} {stderr}");
    let answer: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(answer["overallCode"], "OVER_LIMIT", "{stdout}");
    // Errors exit 1 (nothing listens there), usage errors 2.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let (code, _, stderr) = run_bin_code(&[
        "query",
        "--addr",
        &closed,
        "--domain",
        "edge",
        "--descriptor",
        "a=b",
    ])
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    let (code, _, stderr) = run_bin_code(&[
        "query",
        "--addr",
        &addr,
        "--domain",
        "edge",
        "--descriptor",
        "a=b;cost=1",
    ])
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("only ';hits=N'"), "{stderr}");
    let (code, _, _) = run_bin_code(&["query", "--descriptor", "a=b"]).await;
    assert_eq!(code, Some(2));

    let killed = bounded("kill", Command::new("kill").arg(pid.to_string()).status())
        .await
        .expect("run kill");
    assert!(killed.success());
    let mut stderr = child.0.stderr.take().expect("stderr");
    let status = bounded("tollgate exit after SIGTERM", child.0.wait())
        .await
        .expect("wait for tollgate");
    assert!(status.success(), "exit status {status}");
    let mut log = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut log)
        .await
        .expect("read stderr");
    assert!(log.contains("tollgate stopped"), "no stop message: {log}");
}

// --- Overload --------------------------------------------------------------------------------

/// With `--max-in-flight 2` and two calls held in the store, a third is refused at once with
/// RESOURCE_EXHAUSTED instead of queueing; once the two finish, calls are answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_beyond_max_in_flight_is_refused_at_once() {
    let store = Arc::new(GatedStore {
        inner: MemoryStore::new(Arc::new(ManualClock::new(T0_US))),
        entered: Notify::new(),
        gate: Semaphore::new(0),
    });
    let settings = Settings {
        max_in_flight: 2,
        ..Settings::default()
    };
    let server = start_with_store(CONFIG, settings.into(), store.clone()).await;
    let mut held = Vec::new();
    for i in 0..2 {
        let mut client = server.client().await;
        held.push(tokio::spawn(async move {
            try_call(&mut client, req("test", &[&[("a", &format!("held{i}"))]])).await
        }));
        bounded("call reaches the store", store.entered.notified()).await;
    }
    let mut client = server.client().await;
    let started = Instant::now();
    let refused = try_call(&mut client, req("test", &[&[("a", "third")]]))
        .await
        .expect_err("refused");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused after {:?}",
        started.elapsed()
    );
    store.gate.add_permits(100);
    for h in held {
        let answer = bounded("held call", h).await.expect("task");
        assert_eq!(answer.expect("answered").overall_code, OK);
    }
    let resp = call(&mut client, req("test", &[&[("a", "after")]])).await;
    assert_eq!(resp.overall_code, OK);
    server.stop().await;
}

/// The caller's `grpc-timeout` (Envoy's filter timeout) ends the call: it is answered with an
/// error when the deadline passes, not when the store finally answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_grpc_timeout_is_honoured() {
    let store = Arc::new(GatedStore {
        inner: MemoryStore::new(Arc::new(ManualClock::new(T0_US))),
        entered: Notify::new(),
        gate: Semaphore::new(0),
    });
    let server = start_with_store(CONFIG, TestOptions::default(), store.clone()).await;
    let mut client = server.client().await;
    let mut request = tonic::Request::new(req("test", &[&[("a", "late")]]));
    request.set_timeout(Duration::from_millis(50));
    let started = Instant::now();
    let err = bounded("call", client.should_rate_limit(request))
        .await
        .expect_err("past its deadline");
    assert!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered after {:?}",
        started.elapsed()
    );
    store.gate.add_permits(100);
    server.stop().await;
}
