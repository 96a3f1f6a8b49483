//! The Envoy every test of this binary shares, the tollgates it asks and the routes they are
//! asked through.
//!
//! Per store (memory, a Redis node, a Redis Cluster) one `tollgate serve` and one Envoy
//! listener whose routes each exercise one thing (see [`main_routes`]); every listener fails
//! closed (`failure_mode_deny: true`), so an error can never pass for an allowed request. The
//! tollgates close every gRPC connection after a second (`--grpc-max-connection-age 1s`): every
//! test runs across connection-age GOAWAYs. For the failure tests, four more tollgates (one
//! per `--failure-mode`) on a Redis of their own, each behind a fail-open and a fail-closed
//! listener ([`Failing`]).
//!
//! Limits are per hour and every test uses descriptor values of its own, so tests running at
//! once never share a counter.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::sync::OnceCell;

use crate::support::binary::Binary;
use crate::support::envoy::{admin, cluster, socket_address, Backend, Envoy};
use crate::support::kit::{blocking, redis_cluster, redis_single, StoreKind};
use crate::support::redis::RedisServer;
use crate::support::server::ports;

/// Domain `envoy-test`: what the routes of [`main_routes`] ask about.
pub const EDGE_CONFIG: &str = r#"
domain: envoy-test
descriptors:
  - key: tenant                    # enforce.rs and failure.rs
    rate_limit: {name: per-tenant, unit: hour, requests_per_unit: 3}
  - key: cost_key                  # costs.rs
    rate_limit: {name: per-cost-key, unit: hour, requests_per_unit: 10}
  - key: scope                     # enforce.rs: a tenant (org) and a limit all orgs share
    descriptors:
      - key: org
        hierarchical: true
        rate_limits:
          - {name: per-org, unit: hour, requests_per_unit: 3}
          - {name: all-orgs, unit: hour, requests_per_unit: 5, shared: true}
        descriptors:
          - key: user
            rate_limit: {name: per-user, unit: hour, requests_per_unit: 2}
  - key: grpc_caller               # enforce.rs: gRPC callers through Envoy
    rate_limit: {name: per-grpc-caller, unit: hour, requests_per_unit: 2}
  - key: load                      # enforce.rs: load across connection-age GOAWAYs
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: wait_key                  # waiting.rs: held until it fits, not refused
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, max_wait: 2s}
  - key: pool_model                # waiting.rs: classes sharing a pool
    hierarchical: true
    rate_limit:
      name: pool-rph
      unit: hour
      requests_per_unit: 20
      shared: true
      shares: {by: priority, classes: {interactive: 0.5, batch: 0.25}, default: batch, borrow_until: 0.5}
    descriptors: [{key: priority}]
"#;

/// Domain `llm-slots` (slots.rs): generations in flight per model, 2 at a time, released by
/// Envoy's call when the stream is done (`model_in_flight`, lease 5 min), and 1 at a time on a
/// route that never releases (`model_unreleased`, lease 1 s).
pub const SLOTS_CONFIG: &str = r#"
domain: llm-slots
descriptors:
  - key: model_in_flight
    rate_limit: {name: in-flight, algorithm: concurrency, requests_per_unit: 2, lease_ttl: 5m}
  - key: model_unreleased
    rate_limit: {name: in-flight-unreleased, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1s}
"#;

/// Two domains with the same plain envoyproxy/ratelimit limit (100 tokens an hour per
/// tenant): `llm-usage` is a usage domain (`--usage-domains 'llm-usage*'`), `llm-plain` is not.
pub const LLM_CONFIGS: [(&str, &str); 2] = [
    (
        "llm-usage.yaml",
        "domain: llm-usage\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 100}\n",
    ),
    (
        "llm-plain.yaml",
        "domain: llm-plain\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 100}\n",
    ),
];

/// Two domains of 1,000 tokens an hour per tenant for reservations (reservations.rs): in
/// `llm-reserve` a request without an estimate is charged 100, in `llm-reserve-strict` it is
/// refused.
pub const RESERVE_CONFIGS: [(&str, &str); 2] = [
    (
        "llm-reserve.yaml",
        "domain: llm-reserve\nreservations: {default_estimate: 100}\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n",
    ),
    (
        "llm-reserve-strict.yaml",
        "domain: llm-reserve-strict\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n",
    ),
];

/// A money budget (money.rs): USD 0.10 an hour per tenant, two models priced per million
/// tokens, usage landing as overdraft (it is charged when the stream is done).
pub const MONEY_CONFIG: (&str, &str) = (
    "llm-money.yaml",
    "domain: llm-money
prices:
  per_million_tokens:
    gpt-4o-mini: {input: 0.15, output: 0.60}
    o1: {input: 15, output: 60}
descriptors:
  - key: tenant
    hierarchical: true
    rate_limit: {unit: hour, spend: 0.10, overdraft: true}
",
);

/// Envoy's filter timeout on the shared listeners: generous, so a loaded test machine never
/// turns a slow answer into a failure, and above `wait_key`'s `max_wait` (waiting.rs); the
/// failure tests set their own.
const TIMEOUT: &str = "3s";
/// The failure listeners' filter timeout, and the failing tollgates' Redis deadline.
pub const FAILURE_FILTER_TIMEOUT: Duration = Duration::from_millis(500);
const FAILURE_REDIS_TIMEOUT: &str = "50ms";

/// One store's side of the fixture.
pub struct Side {
    pub kind: StoreKind,
    /// Envoy's listener for this store.
    pub port: u16,
    /// The cluster this listener's HTTP routes go to (Envoy's `ratelimit.*` stats are under it).
    pub backend_cluster: String,
    /// The rate limit service cluster (also the gRPC routes' upstream).
    pub rls_cluster: String,
    pub tollgate: Binary,
}

impl Side {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn name(&self) -> &'static str {
        self.kind.name()
    }
}

/// One `--failure-mode`'s tollgate (on the failing Redis) and its two listeners.
pub struct Failing {
    pub mode: &'static str,
    /// Listener with `failure_mode_deny: false` and its backend cluster.
    pub open_port: u16,
    pub open_cluster: String,
    /// Listener with `failure_mode_deny: true` and its backend cluster.
    pub closed_port: u16,
    pub closed_cluster: String,
    /// Taken (and stopped) by the failure test.
    pub tollgate: Mutex<Option<Binary>>,
}

pub struct Fixture {
    pub envoy: Envoy,
    pub sides: Vec<Side>,
    pub failing: Vec<Failing>,
    /// The Redis the failing tollgates use, paused by the failure test.
    pub failing_redis: RedisServer,
}

/// The shared fixture, started by the first test that asks.
pub async fn fixture() -> &'static Fixture {
    static FIXTURE: OnceCell<Fixture> = OnceCell::const_new();
    FIXTURE.get_or_init(start).await
}

/// Held by the tests that load Envoy hard or time its answers (one Envoy worker serves every
/// listener), so they never run at once.
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static EXCLUSIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    EXCLUSIVE.lock().await
}

/// A descriptor value no other test (or run) uses.
pub fn unique(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_007);
    format!(
        "{what}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

fn config_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("envoy-tollgate-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("config directory");
    std::fs::write(dir.join("envoy-test.yaml"), EDGE_CONFIG).expect("write config");
    for (file, text) in LLM_CONFIGS {
        std::fs::write(dir.join(file), text).expect("write config");
    }
    std::fs::write(dir.join("llm-slots.yaml"), SLOTS_CONFIG).expect("write config");
    for (file, text) in RESERVE_CONFIGS {
        std::fs::write(dir.join(file), text).expect("write config");
    }
    std::fs::write(dir.join(MONEY_CONFIG.0), MONEY_CONFIG.1).expect("write config");
    dir
}

/// Starts `tollgate serve` on the fixture's config with `extra` arguments.
async fn tollgate(name: &str, extra: &[&str]) -> Binary {
    let config = config_dir();
    let mut args = vec![
        "--response-headers",
        "--usage-domains",
        "llm-usage*",
        "--grpc-max-connection-age",
        "1s",
        "--config-reload-interval",
        "off",
    ];
    args.extend_from_slice(extra);
    let log = config.join(format!("tollgate-{name}.log"));
    let mut binary = Binary::serve(&config, &args, Some(log)).await;
    binary.wait_ready().await;
    binary
}

async fn start() -> Fixture {
    let backend = Backend::get();
    let mut listeners = Vec::new();
    let mut clusters = Vec::new();

    let mut sides = Vec::new();
    for kind in StoreKind::ALL {
        let name = kind.name();
        let prefix = format!("envoy-{}:", std::process::id());
        let redis = match kind {
            StoreKind::Memory => None,
            StoreKind::Redis => Some(blocking(|| redis_single().url())),
            StoreKind::Cluster => Some(blocking(|| redis_cluster().seed_url())),
        };
        let mut extra = vec!["--redis-key-prefix", &prefix, "--redis-timeout", "500ms"];
        if let Some(url) = &redis {
            extra.extend(["--redis-url", url.as_str()]);
        }
        sides.push(Side {
            kind,
            port: 0,
            backend_cluster: format!("backend_{name}"),
            rls_cluster: format!("rls_{name}"),
            tollgate: tollgate(name, &extra).await,
        });
    }

    let failing_redis = blocking(RedisServer::start);
    let mut failing = Vec::new();
    for mode in ["error", "allow", "deny", "local"] {
        let url = failing_redis.url();
        let tollgate = tollgate(
            &format!("failing-{mode}"),
            &[
                "--redis-url",
                &url,
                "--redis-timeout",
                FAILURE_REDIS_TIMEOUT,
                "--failure-mode",
                mode,
            ],
        )
        .await;
        failing.push(Failing {
            mode,
            open_port: 0,
            open_cluster: format!("backend_failing_{mode}_open"),
            closed_port: 0,
            closed_cluster: format!("backend_failing_{mode}_closed"),
            tollgate: Mutex::new(Some(tollgate)),
        });
    }

    // Every tollgate listens now: the ports picked from here on are Envoy's.
    let [admin_port] = ports::<1>();
    for side in &mut sides {
        let name = side.kind.name();
        [side.port] = ports::<1>();
        clusters.push(cluster(&side.backend_cluster, backend.port, false));
        clusters.push(cluster(&side.rls_cluster, side.tollgate.grpc_port(), true));
        listeners.push(listener(
            &format!("main_{name}"),
            side.port,
            &side.rls_cluster,
            TIMEOUT,
            true,
            main_routes(side),
        ));
    }
    for f in &mut failing {
        let rls = format!("rls_failing_{}", f.mode);
        let tollgate = f.tollgate.get_mut().expect("lock");
        let port = tollgate.as_ref().expect("running").grpc_port();
        clusters.push(cluster(&rls, port, true));
        [f.open_port, f.closed_port] = ports::<2>();
        let timeout = format!("{}s", FAILURE_FILTER_TIMEOUT.as_secs_f64());
        for (port, backend_cluster, deny) in [
            (f.open_port, &f.open_cluster, false),
            (f.closed_port, &f.closed_cluster, true),
        ] {
            clusters.push(cluster(backend_cluster, backend.port, false));
            let routes = json!([{
                "match": {"prefix": "/"},
                "route": {
                    "cluster": backend_cluster,
                    "rate_limits": [{"actions": [header_action("x-tenant", "tenant")]}],
                },
            }]);
            listeners.push(listener(
                &format!("{backend_cluster}_listener"),
                port,
                &rls,
                &timeout,
                deny,
                routes,
            ));
        }
    }

    let bootstrap = json!({
        "admin": admin(admin_port),
        "static_resources": {"listeners": listeners, "clusters": clusters},
    });
    let envoy = Envoy::start(&bootstrap.to_string(), admin_port).await;
    Fixture {
        envoy,
        sides,
        failing,
        failing_redis,
    }
}

/// A `request_headers` rate limit action.
pub fn header_action(header: &str, key: &str) -> Value {
    json!({"request_headers": {"header_name": header, "descriptor_key": key}})
}

/// The concurrency pattern (`examples/envoy/envoy.yaml`'s `/v1/generate`): `model_in_flight`
/// from `x-model` when the request arrives, and when the stream is done the same entry with
/// `tollgate.release` = the slot id tollgate answered (`tollgate.slot` in the filter's dynamic
/// metadata). No `default_value`: a request that got no id sends no release.
pub fn slot_limits() -> Value {
    let model = header_action("x-model", "model_in_flight");
    json!([
        {"actions": [model.clone()]},
        {
            "actions": [model, {"metadata": {
                "descriptor_key": "tollgate.release",
                "metadata_key": {"key": "envoy.filters.http.ratelimit", "path": [{"key": "tollgate.slot"}]},
                "source": "DYNAMIC",
            }}],
            "apply_on_stream_done": true,
        },
    ])
}

/// The reservation pattern (`examples/envoy/envoy.yaml`'s `/v1/chat`): when the request
/// arrives, `tenant` from `x-tenant` reserving the estimate in `x-max-tokens`, and beside it the
/// same entries marked `fallback` (Envoy drops the first when the header is absent: tollgate then
/// charges the domain's default estimate, or refuses); when the stream is done, the same entry
/// with `tollgate.settle` = the reservation id tollgate answered (`tollgate.reservation` in the
/// filter's dynamic metadata) and the tokens the response used (`tollgate.test:tokens`, set from
/// its `x-tokens-used`) as the actual use. No usage, or no id: Envoy sends no settle, and the
/// estimate stays charged.
pub fn reserve_limits() -> Value {
    let tenant = header_action("x-tenant", "tenant");
    let mark = |value: &str| json!({"generic_key": {"descriptor_key": "tollgate.reserve", "descriptor_value": value}});
    json!([
        {
            "actions": [tenant.clone(), mark("estimate")],
            "hits_addend": {"format": "%REQ(x-max-tokens)%"},
        },
        {"actions": [tenant.clone(), mark("fallback")]},
        {
            "actions": [tenant, {"metadata": {
                "descriptor_key": "tollgate.settle",
                "metadata_key": {"key": "envoy.filters.http.ratelimit", "path": [{"key": "tollgate.reservation"}]},
                "source": "DYNAMIC",
            }}],
            "apply_on_stream_done": true,
            "hits_addend": {"format": "%DYNAMIC_METADATA(tollgate.test:tokens)%"},
        },
    ])
}

/// A money budget's calls (domain `llm-money`): on the request a check of cost 0 of `tenant`
/// (`x-tenant`) and `model` (`x-model`), refused once the budget is spent or for a model the
/// prices do not know; when the stream is done one descriptor per token kind, `kind=input`
/// and `kind=output`, each with its count from response metadata (the backend's
/// `x-input-used` and `x-tokens-used`), priced and charged in one decision.
pub fn money_limits() -> Value {
    let tenant = header_action("x-tenant", "tenant");
    let model = header_action("x-model", "model");
    let kind = |k: &str| json!({"generic_key": {"descriptor_key": "kind", "descriptor_value": k}});
    json!([
        {"actions": [tenant.clone(), model.clone()], "hits_addend": {"number": 0}},
        {
            "actions": [tenant.clone(), model.clone(), kind("input")],
            "apply_on_stream_done": true,
            "hits_addend": {"format": "%DYNAMIC_METADATA(tollgate.test:input)%"},
        },
        {
            "actions": [tenant, model, kind("output")],
            "apply_on_stream_done": true,
            "hits_addend": {"format": "%DYNAMIC_METADATA(tollgate.test:tokens)%"},
        },
    ])
}

/// A route whose rate limits are the ratelimit filter's per-route config
/// (`RateLimitPerRoute.rate_limits`, where Envoy sends `hits_addend`), with `domain` when set.
fn per_filter_route(prefix: &str, cluster: &str, domain: Option<&str>, limits: Value) -> Value {
    let mut per_route = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
        "rate_limits": limits,
    });
    if let Some(domain) = domain {
        per_route["domain"] = json!(domain);
    }
    json!({
        "match": {"prefix": prefix},
        "route": {"cluster": cluster},
        "typed_per_filter_config": {"envoy.filters.http.ratelimit": per_route},
    })
}

/// The routes of a store's listener, one per thing tested:
/// - `/enforce`: `tenant` from `x-tenant`, written in the route's own `rate_limits`;
/// - `/cost/number`, `/cost/check`, `/cost/header`, `/cost/metadata`: `cost_key` from
///   `x-cost-key` with `hits_addend` 3, 0, `%REQ(x-cost)%` and dynamic metadata (set from
///   request header `x-meta-cost` by `header_to_metadata`);
/// - `/hier`: one descriptor `scope, org, user`;
/// - `/grpc.health.v1.Health/`: gRPC to tollgate's own health service, `grpc_caller` from
///   `x-caller`;
/// - `/llm/usage`, `/llm/plain`: Envoy's LLM token pattern in domains `llm-usage` and
///   `llm-plain` (a check of cost 0 on the request, the response's `x-tokens-used` charged when
///   the stream ends);
/// - `/slots/held` (domain `llm-slots`, the filter's per-route list) and `/slots/route`
///   (the route's own `rate_limits`): a slot of `model_in_flight` from `x-model` taken on the
///   request and released when the stream is done (see [`slot_limits`]);
/// - `/slots/unreleased`: a slot of `model_unreleased` from `x-model`, never released;
/// - `/reserve/default`, `/reserve/strict`: reservations (domains `llm-reserve` and
///   `llm-reserve-strict`, see [`reserve_limits`]);
/// - `/money`: a money budget (domain `llm-money`, see [`money_limits`]);
/// - `/wait`: `wait_key` from `x-wait-key`, a token bucket that may hold a request 2 s;
/// - `/pool`: `pool_model` from `x-pool` and `priority` from `x-priority`, a pool of 20 an hour
///   with guaranteed shares by class;
/// - `/load`: `load` from `x-load`, never denied.
fn main_routes(side: &Side) -> Value {
    let backend = side.backend_cluster.as_str();
    let cost = |hits: Value| json!([{"actions": [header_action("x-cost-key", "cost_key")], "hits_addend": hits}]);
    let tokens = |domain: &str| {
        let tenant = header_action("x-tenant", "tenant");
        per_filter_route(
            &format!("/llm/{domain}"),
            backend,
            Some(&format!("llm-{domain}")),
            json!([
                {"actions": [tenant.clone()], "hits_addend": {"number": 0}},
                {
                    "actions": [tenant],
                    "apply_on_stream_done": true,
                    "hits_addend": {"format": "%DYNAMIC_METADATA(tollgate.test:tokens)%"},
                },
            ]),
        )
    };
    json!([
        {
            "match": {"prefix": "/enforce"},
            "route": {
                "cluster": backend,
                "rate_limits": [{"actions": [header_action("x-tenant", "tenant")]}],
            },
        },
        per_filter_route("/cost/number", backend, None, cost(json!({"number": 3}))),
        per_filter_route("/cost/check", backend, None, cost(json!({"number": 0}))),
        per_filter_route("/cost/header", backend, None, cost(json!({"format": "%REQ(x-cost)%"}))),
        per_filter_route(
            "/cost/metadata",
            backend,
            None,
            cost(json!({"format": "%DYNAMIC_METADATA(tollgate.test:cost)%"})),
        ),
        {
            "match": {"prefix": "/hier"},
            "route": {
                "cluster": backend,
                "rate_limits": [{"actions": [
                    header_action("x-scope", "scope"),
                    header_action("x-org", "org"),
                    header_action("x-user", "user"),
                ]}],
            },
        },
        {
            "match": {"prefix": "/grpc.health.v1.Health/"},
            "route": {
                "cluster": side.rls_cluster,
                "rate_limits": [{"actions": [header_action("x-caller", "grpc_caller")]}],
            },
        },
        tokens("usage"),
        tokens("plain"),
        per_filter_route("/slots/held", backend, Some("llm-slots"), slot_limits()),
        {
            "match": {"prefix": "/slots/route"},
            "route": {"cluster": backend, "rate_limits": slot_limits()},
            // Only the domain: the route's own rate_limits stay in force.
            "typed_per_filter_config": {"envoy.filters.http.ratelimit": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
                "domain": "llm-slots",
            }},
        },
        per_filter_route("/reserve/default", backend, Some("llm-reserve"), reserve_limits()),
        per_filter_route("/money", backend, Some("llm-money"), money_limits()),
        per_filter_route(
            "/reserve/strict",
            backend,
            Some("llm-reserve-strict"),
            reserve_limits(),
        ),
        per_filter_route(
            "/slots/unreleased",
            backend,
            Some("llm-slots"),
            json!([{"actions": [header_action("x-model", "model_unreleased")]}]),
        ),
        {
            "match": {"prefix": "/wait"},
            "route": {
                "cluster": backend,
                "rate_limits": [{"actions": [header_action("x-wait-key", "wait_key")]}],
            },
        },
        {
            "match": {"prefix": "/pool"},
            "route": {
                "cluster": backend,
                "rate_limits": [{"actions": [
                    header_action("x-pool", "pool_model"),
                    header_action("x-priority", "priority"),
                ]}],
            },
        },
        {
            "match": {"prefix": "/load"},
            "route": {
                "cluster": backend,
                "rate_limits": [{"actions": [header_action("x-load", "load")]}],
            },
        },
    ])
}

/// A listener on `port` whose ratelimit filter (domain `envoy-test`) asks `rls`.
pub fn listener(
    name: &str,
    port: u16,
    rls: &str,
    timeout: &str,
    failure_mode_deny: bool,
    routes: Value,
) -> Value {
    let metadata_rule = |header: &str, key: &str| {
        json!({
            "header": header,
            "on_header_present": {"metadata_namespace": "tollgate.test", "key": key, "type": "STRING"},
            "remove": false,
        })
    };
    json!({
        "name": name,
        "address": socket_address(port),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": name,
                "route_config": {"virtual_hosts": [{"name": name, "domains": ["*"], "routes": routes}]},
                "http_filters": [
                    {
                        "name": "envoy.filters.http.header_to_metadata",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
                            "request_rules": [metadata_rule("x-meta-cost", "cost")],
                            "response_rules": [
                                metadata_rule("x-tokens-used", "tokens"),
                                metadata_rule("x-input-used", "input"),
                            ],
                        },
                    },
                    {
                        "name": "envoy.filters.http.ratelimit",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
                            "domain": "envoy-test",
                            "timeout": timeout,
                            "failure_mode_deny": failure_mode_deny,
                            "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
                            "rate_limited_as_resource_exhausted": true,
                            "rate_limit_service": {
                                "transport_api_version": "V3",
                                "grpc_service": {"envoy_grpc": {"cluster_name": rls}},
                            },
                        },
                    },
                    {
                        "name": "envoy.filters.http.router",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
                        },
                    },
                ],
            },
        }]}],
    })
}
