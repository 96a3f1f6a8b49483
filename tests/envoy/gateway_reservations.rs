//! Reservations for Envoy Gateway's config, which cannot carry tollgate's marks: a rule with a
//! request cost and a response cost, as its translator writes it (two rate limits with one set
//! of actions, the second `apply_on_stream_done`), and a distinct match on `x-request-id`
//! (which the edge generates) named by `TOLLGATE_RESERVATION_PAIR_KEYS`. The limits come over
//! xDS as Envoy Gateway's xDS server sends them: the route's generic key, the tenant's distinct
//! match, the request id's distinct match, the limit on the last (see `service::paired`).
//!
//! 20 generations of a request cost of 100 started together against 1,000 tokens an hour: 10
//! admitted while they run; each settles with the 40 tokens it used when its stream is done,
//! so 6 more fit afterwards, and the spend never passes the budget.

use std::path::PathBuf;
use std::time::Duration;

use prometheus_parse::Scrape;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::envoy_gateway::tollgate;
use super::fixture::unique;
use super::slots::{generation_with, sum, Generation};
use crate::support::binary::Binary;
use crate::support::envoy::{admin, cluster, socket_address, Backend, Envoy};
use crate::support::server::{http_client, ports};
use crate::support::xds::{domain, limit, nest, ControlPlane, HOUR};

const DOMAIN: &str = "default/eg/http";
const CHAT: &str = "httproute/default/chat/rule/0/match/0/*";

/// The budget: 1,000 tokens an hour for each `x-tenant` (rule 0: match 0 the tenant, match 1
/// the request id, both distinct).
fn eg_config() -> tollgate::pb::rls_conf::RateLimitConfig {
    domain(
        DOMAIN,
        vec![nest(
            CHAT,
            CHAT,
            vec![nest(
                "rule-0-match-0",
                "",
                vec![limit("rule-0-match-1", "", HOUR, 1000)],
            )],
        )],
    )
}

/// Envoy Gateway's listener for the chat route: the request cost a number (100, the policy's
/// most tokens a generation may use), the response cost the tokens the response used, from
/// dynamic metadata (here set from the backend's `x-tokens-used`, as Envoy AI Gateway sets
/// its own).
fn bootstrap(listen: u16, admin_port: u16, rls_port: u16) -> Value {
    let actions = json!([
        {"generic_key": {"descriptor_key": CHAT, "descriptor_value": CHAT}},
        {"request_headers": {"header_name": "x-tenant", "descriptor_key": "rule-0-match-0"}},
        {"request_headers": {"header_name": "x-request-id", "descriptor_key": "rule-0-match-1"}},
    ]);
    let route = json!({
        "name": CHAT,
        "match": {"prefix": "/v1/chat"},
        "route": {"cluster": "backend"},
        "typed_per_filter_config": {"envoy.filters.http.ratelimit": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
            "domain": DOMAIN,
            "rate_limits": [
                {"actions": actions, "hits_addend": {"number": 100}},
                {
                    "actions": actions,
                    "apply_on_stream_done": true,
                    "hits_addend": {"format": "%DYNAMIC_METADATA(io.envoyproxy.gateway.test:tokens)%"},
                },
            ],
        }},
    });
    let filters = json!([
        {
            "name": "envoy.filters.http.header_to_metadata",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
                "response_rules": [{
                    "header": "x-tokens-used",
                    "on_header_present": {"metadata_namespace": "io.envoyproxy.gateway.test", "key": "tokens", "type": "STRING"},
                    "remove": false,
                }],
            },
        },
        {
            "name": "envoy.filters.http.ratelimit",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
                "domain": DOMAIN,
                "timeout": "2s",
                "failure_mode_deny": true,
                "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
                "disable_x_envoy_ratelimited_header": true,
                "rate_limit_service": {
                    "transport_api_version": "V3",
                    "grpc_service": {"envoy_grpc": {"cluster_name": "ratelimit_cluster"}},
                },
            },
        },
        {
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
        },
    ]);
    json!({
        "admin": admin(admin_port),
        "static_resources": {
            "listeners": [{
                "name": DOMAIN,
                "address": socket_address(listen),
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": format!("http-{listen}"),
                        "use_remote_address": true,
                        "route_config": {
                            "name": DOMAIN,
                            "virtual_hosts": [{
                                "name": format!("{DOMAIN}/any"),
                                "domains": ["*"],
                                "routes": [route],
                            }],
                        },
                        "http_filters": filters,
                    },
                }]}],
            }],
            "clusters": [
                cluster("ratelimit_cluster", rls_port, true),
                cluster("backend", Backend::get().port, false),
            ],
        },
    })
}

/// tollgate's `tollgate_reservation_settles_total{result}`.
async fn settles(tollgate: &Binary, result: &str) -> u64 {
    let text = http_client()
        .get(format!("{}/metrics", tollgate.http_url))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text");
    sum(
        &scrape,
        "tollgate_reservation_settles_total",
        &[("result", result)],
    )
}

/// `n` generations of `tenant` started together: those admitted, and how many were refused.
async fn start(url: &str, tenant: &str, n: usize) -> (Vec<Generation>, usize) {
    let headers = [("x-tenant", tenant), ("x-completion-tokens", "40")];
    let started = futures::future::join_all((0..n).map(|_| generation_with(url, &headers))).await;
    let mut running = Vec::new();
    let mut refused = 0;
    for g in started {
        match g {
            Ok(g) => running.push(g),
            Err(status) => {
                assert_eq!(status, 429, "a refusal, not a failure");
                refused += 1;
            }
        }
    }
    (running, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_request_and_response_costs_pair_into_reservations() {
    let plane = ControlPlane::start(None);
    plane.set("1", vec![eg_config()]);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let log = dir.join(format!(
        "tollgate-eg-reservations-{}.log",
        std::process::id()
    ));
    let env = vec![(
        "TOLLGATE_RESERVATION_PAIR_KEYS".to_string(),
        "rule-0-match-1".to_string(),
    )];
    let tollgate = tollgate(&plane, log, env).await;
    plane.wait_ack("1", 0).await;
    let [listen, admin_port] = ports::<2>();
    let envoy = Envoy::start(
        &bootstrap(listen, admin_port, tollgate.grpc_port()).to_string(),
        admin_port,
    )
    .await;
    let ctx = || {
        format!(
            "tollgate log:\n{}\nEnvoy log:\n{}",
            tollgate.log(),
            envoy.log()
        )
    };
    let url = format!("http://127.0.0.1:{listen}/v1/chat");
    let tenant = unique("tenant");

    // 20 together: 100 reserved for each admitted one, so 10 while they run.
    let (running, refused) = start(&url, &tenant, 20).await;
    assert_eq!((running.len(), refused), (10, 10), "{}", ctx());
    for g in running {
        g.finish().await;
    }
    // Each stream-done call settles its request's reservation with the 40 tokens it used.
    let deadline = Instant::now() + Duration::from_secs(5);
    while settles(&tollgate, "settled").await < 10 {
        assert!(Instant::now() < deadline, "10 settles; {}", ctx());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 400 spent: 6 more fit.
    let (running, refused) = start(&url, &tenant, 10).await;
    assert_eq!((running.len(), refused), (6, 4), "{}", ctx());
    for g in running {
        g.finish().await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while settles(&tollgate, "settled").await < 16 {
        assert!(Instant::now() < deadline, "16 settles; {}", ctx());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 640 spent, 360 left: 3 more of 100.
    let (running, refused) = start(&url, &tenant, 5).await;
    assert_eq!((running.len(), refused), (3, 2), "{}", ctx());
    for g in running {
        g.disconnect();
    }
    // A client that sends its own x-request-id, the same on every request, cannot make one
    // request the settle of another: the edge makes the id (use_remote_address, no
    // preserve_external_request_id), so 10 of 100 fit as before.
    let tenant = unique("tenant");
    let same = unique("request");
    let headers = [
        ("x-tenant", tenant.as_str()),
        ("x-request-id", same.as_str()),
        ("x-completion-tokens", "40"),
    ];
    let mut held = Vec::new();
    for _ in 0..11 {
        if let Ok(g) = generation_with(&url, &headers).await {
            held.push(g);
        }
    }
    assert_eq!(
        held.len(),
        10,
        "one x-request-id sent by the client; {}",
        ctx()
    );
    for g in held {
        g.disconnect();
    }
    // A settle of a request id tollgate never reserved never happened: every stream-done call
    // found its reservation.
    assert_eq!(settles(&tollgate, "unknown").await, 0, "{}", ctx());

    let stats = envoy.ratelimit_stats("backend").await;
    assert_eq!(
        (stats.error, stats.failure_mode_allowed),
        (0, 0),
        "{stats:?}"
    );
}
