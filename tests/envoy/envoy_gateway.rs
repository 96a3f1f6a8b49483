//! tollgate behind a real Envoy configured as Envoy Gateway configures it, with its limits
//! delivered over xDS as Envoy Gateway delivers them (issue 33).
//!
//! Envoy Gateway turns a `BackendTrafficPolicy`'s global rate limit rules into two things:
//! rate limit actions on the Envoy route, and a `RateLimitConfig` resource its xDS server
//! hands the rate limit service. Both are written here the way its translator
//! (`internal/xds/translator/ratelimit.go`, v1.9.0) writes them, checked against its golden
//! files (`testdata/out/xds-ir/ratelimit*.routes.yaml`, `testdata/out/ratelimit-config/*.yaml`):
//!
//! - the domain is the listener's name (`<namespace>/<gateway>/<listener>`), set on the
//!   `envoy.filters.http.ratelimit` filter and on each route's `RateLimitPerRoute`;
//! - every rule's actions start with a `generic_key` whose key and value are the route's name,
//!   then one action per match: `request_headers` (key `rule-R-match-M`) for a distinct header,
//!   `header_value_match` (key and value `rule-R-match-M`) for an exact header value,
//!   `remote_address_match` (key `masked_remote_address`, value the CIDR) for a source CIDR,
//!   plus `remote_address_match` (key `remote_address`, value
//!   `%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%`) when the CIDR is distinct;
//! - the config nests the same keys: the route's name, then each match's key (with no value
//!   for a distinct match, so every value counts on its own), the limit on the last.
//!
//! Envoy Gateway up to v1.7 wrote a CIDR match as Envoy's `masked_remote_address` action (no
//! key of its own: `masked_remote_address`, value the masked address) in the route's own
//! `rate_limits`; one route keeps that shape, against the same config.
//!
//! The listener fails closed (`failure_mode_deny`, Envoy Gateway's `failClosed`), so an error
//! can never pass for an allowed request.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use tollgate::pb::rls_conf::{RateLimitConfig, RateLimitDescriptor};

use super::enforce::{header, within_one_hour};
use super::fixture::unique;
use crate::support::binary::{Binary, Start, BIN};
use crate::support::envoy::{admin, cluster, socket_address, Backend, Envoy};
use crate::support::server::ports;
use crate::support::xds::{domain, limit, nest, ControlPlane, HOUR};

/// The Gateway `eg`'s listener `http` in namespace `default`: the domain.
const DOMAIN: &str = "default/eg/http";
const HOST: &str = "www.example.com";

/// Envoy Gateway's route names (`httproute/<namespace>/<name>/rule/<i>/match/<j>/<host>`),
/// each the generic key of its rules.
const USERS: &str = "httproute/default/users/rule/0/match/0/www_example_com";
const PLANS: &str = "httproute/default/plans/rule/0/match/0/www_example_com";
const OFFICE: &str = "httproute/default/office/rule/0/match/0/www_example_com";
const PER_IP: &str = "httproute/default/per-ip/rule/0/match/0/www_example_com";
const LEGACY: &str = "httproute/default/legacy/rule/0/match/0/www_example_com";

/// The one client address each source-CIDR rule matches (`/32`), and clients outside them.
const OFFICE_IP: &str = "127.0.33.1";
const LEGACY_IP: &str = "127.0.33.2";
const OTHER_IP: &str = "127.0.33.3";
/// The distinct-per-IP rule's CIDR and two clients inside it.
const PER_IP_CIDR: (&str, u32) = ("127.0.34.0", 24);
const PER_IP_CLIENTS: [&str; 2] = ["127.0.34.1", "127.0.34.2"];

/// The `RateLimitConfig` Envoy Gateway's xDS server would send for the routes of
/// [`routes`], with `per_user` requests an hour for each `x-user-id`:
/// - `users`: header `x-user-id`, distinct (each value its own bucket);
/// - `plans`: header `x-plan` exactly `free` (one bucket for all of them), 2 an hour;
/// - `office`: source CIDR `OFFICE_IP/32`, 2 an hour;
/// - `per-ip`: source CIDR `PER_IP_CIDR`, distinct (each address its own bucket), 1 an hour;
/// - `legacy`: source CIDR `LEGACY_IP/32` (Envoy Gateway ≤ 1.7's action), 2 an hour.
fn eg_config(per_user: u32) -> RateLimitConfig {
    let masked = |ip: &str| format!("{ip}/32");
    let (net, len) = PER_IP_CIDR;
    let rule = |route: &str, matched: RateLimitDescriptor| nest(route, route, vec![matched]);
    domain(
        DOMAIN,
        vec![
            rule(USERS, limit("rule-0-match-0", "", HOUR, per_user)),
            rule(PLANS, limit("rule-0-match-0", "rule-0-match-0", HOUR, 2)),
            rule(
                OFFICE,
                limit("masked_remote_address", &masked(OFFICE_IP), HOUR, 2),
            ),
            rule(
                PER_IP,
                nest(
                    "masked_remote_address",
                    &format!("{net}/{len}"),
                    vec![limit("remote_address", "", HOUR, 1)],
                ),
            ),
            rule(
                LEGACY,
                limit("masked_remote_address", &masked(LEGACY_IP), HOUR, 2),
            ),
        ],
    )
}

/// Envoy Gateway's `remote_address_match` action for `net/len` under `key` with `value`.
fn remote_address_match(net: &str, len: u32, key: &str, value: &str) -> Value {
    json!({"remote_address_match": {
        "address_matcher": {"ranges": [{"address_prefix": net, "prefix_len": len}]},
        "descriptor_key": key,
        "descriptor_value": value,
    }})
}

/// A route as Envoy Gateway v1.9 writes it: named, its rules' actions (after the generic key
/// naming the route) in `RateLimitPerRoute` for the listener's filter, with the domain.
fn eg_route(name: &str, path: &str, matches: Vec<Value>) -> Value {
    let mut actions =
        vec![json!({"generic_key": {"descriptor_key": name, "descriptor_value": name}})];
    actions.extend(matches);
    json!({
        "name": name,
        "match": {"path": path},
        "route": {"cluster": "backend"},
        "typed_per_filter_config": {"envoy.filters.http.ratelimit": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
            "domain": DOMAIN,
            "rate_limits": [{"actions": actions}],
        }},
    })
}

fn routes() -> Value {
    let (net, len) = PER_IP_CIDR;
    json!([
        eg_route(
            USERS,
            "/users",
            vec![json!({"request_headers": {"header_name": "x-user-id", "descriptor_key": "rule-0-match-0"}})],
        ),
        eg_route(
            PLANS,
            "/plans",
            vec![json!({"header_value_match": {
                "descriptor_key": "rule-0-match-0",
                "descriptor_value": "rule-0-match-0",
                "expect_match": true,
                "headers": [{"name": "x-plan", "string_match": {"exact": "free"}}],
            }})],
        ),
        eg_route(
            OFFICE,
            "/office",
            vec![remote_address_match(
                OFFICE_IP,
                32,
                "masked_remote_address",
                &format!("{OFFICE_IP}/32"),
            )],
        ),
        eg_route(
            PER_IP,
            "/per-ip",
            vec![
                remote_address_match(net, len, "masked_remote_address", &format!("{net}/{len}")),
                remote_address_match(
                    net,
                    len,
                    "remote_address",
                    "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
                ),
            ],
        ),
        // Envoy Gateway ≤ 1.7: the route's own rate_limits, `masked_remote_address`.
        {
            "name": LEGACY,
            "match": {"path": "/legacy"},
            "route": {
                "cluster": "backend",
                "rate_limits": [{"actions": [
                    {"generic_key": {"descriptor_key": LEGACY, "descriptor_value": LEGACY}},
                    {"masked_remote_address": {"v4_prefix_mask_len": 32}},
                ]}],
            },
        },
    ])
}

/// Envoy Gateway's listener: `use_remote_address`, its rate limit filter (domain, fail
/// closed, DRAFT_VERSION_03 headers, no `x-envoy-ratelimited`) before the router, asking the
/// cluster it names `ratelimit_cluster`.
fn bootstrap(listen: u16, admin_port: u16, rls_port: u16) -> Value {
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
                                "name": format!("{DOMAIN}/www_example_com"),
                                "domains": [HOST],
                                "routes": routes(),
                            }],
                        },
                        "http_filters": [
                            {
                                "name": "envoy.filters.http.ratelimit",
                                "typed_config": {
                                    "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
                                    "domain": DOMAIN,
                                    // Envoy Gateway's rateLimit.timeout; generous here so a
                                    // loaded machine never fails a request (fail closed).
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
                        ],
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

/// `tollgate serve` reading its config from `plane` as node `envoy-ratelimit` (Envoy
/// Gateway's), on the memory store, with `env` besides; ready once the first config has
/// compiled.
pub(super) async fn tollgate(
    plane: &ControlPlane,
    log: PathBuf,
    env: Vec<(String, String)>,
) -> Binary {
    let [grpc, http] = ports::<2>();
    let args = [
        "serve".to_string(),
        "--config-xds".into(),
        format!("http://{}", plane.addr),
        "--config-xds-node-id".into(),
        "envoy-ratelimit".into(),
        "--config-xds-backoff-initial".into(),
        "100ms".into(),
        "--config-xds-backoff-max".into(),
        "400ms".into(),
        "--grpc-addr".into(),
        format!("127.0.0.1:{grpc}"),
        "--http-addr".into(),
        format!("127.0.0.1:{http}"),
    ];
    let mut binary = Binary::start(Start {
        program: Path::new(BIN),
        args: args.to_vec(),
        env,
        clear_env: true,
        grpc_port: grpc,
        http_port: http,
        log_path: Some(log),
    })
    .await;
    binary.wait_ready().await;
    binary
}

/// Envoy's listener, asked as `www.example.com` by a client at `from`.
struct Gateway {
    port: u16,
}

impl Gateway {
    /// `GET path` from `from` with `headers`: the status and the response headers.
    async fn get(&self, from: &str, path: &str, headers: &[(&str, &str)]) -> (u16, HeaderMap) {
        let client = reqwest::Client::builder()
            .local_address(from.parse::<IpAddr>().expect("an address"))
            .timeout(Duration::from_secs(5))
            .build()
            .expect("client");
        let mut req = client
            .get(format!("http://127.0.0.1:{}{path}", self.port))
            .header("host", HOST);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path} from {from}: {e}"));
        (resp.status().as_u16(), resp.headers().clone())
    }

    /// The statuses of `n` requests, and the `x-ratelimit-remaining` each carried.
    async fn statuses(
        &self,
        from: &str,
        path: &str,
        headers: &[(&str, &str)],
        n: usize,
    ) -> Vec<(u16, Option<String>)> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (status, h) = self.get(from, path, headers).await;
            out.push((
                status,
                header(&h, "x-ratelimit-remaining").map(str::to_string),
            ));
        }
        out
    }
}

/// `(status, Some(remaining))` for each of `answers`; `None` for a request no limit covered.
fn expect(answers: &[(u16, Option<&str>)]) -> Vec<(u16, Option<String>)> {
    answers
        .iter()
        .map(|(s, r)| (*s, r.map(str::to_string)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_shaped_limits_over_xds_are_enforced_through_envoy() {
    let plane = ControlPlane::start(None);
    plane.set("1", vec![eg_config(3)]);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let log = dir.join(format!("tollgate-envoy-gateway-{}.log", std::process::id()));
    let tollgate = tollgate(&plane, log, Vec::new()).await;
    plane.wait_ack("1", 0).await;
    let [listen, admin_port] = ports::<2>();
    let envoy = Envoy::start(
        &bootstrap(listen, admin_port, tollgate.grpc_port()).to_string(),
        admin_port,
    )
    .await;
    let gw = Gateway { port: listen };
    let ctx = || {
        format!(
            "tollgate log:\n{}\nEnvoy log:\n{}",
            tollgate.log(),
            envoy.log()
        )
    };
    within_one_hour().await;

    // Distinct x-user-id: 3 an hour for each user.
    let (alice, bob) = (unique("alice"), unique("bob"));
    assert_eq!(
        gw.statuses(OTHER_IP, "/users", &[("x-user-id", &alice)], 4)
            .await,
        expect(&[
            (200, Some("2")),
            (200, Some("1")),
            (200, Some("0")),
            (429, Some("0"))
        ]),
        "alice; {}",
        ctx()
    );
    let (status, h) = gw.get(OTHER_IP, "/users", &[("x-user-id", &bob)]).await;
    assert_eq!(status, 200, "bob has a bucket of his own: {h:?}");
    assert_eq!(header(&h, "x-ratelimit-limit"), Some("3, 3;w=3600"));
    assert_eq!(header(&h, "x-ratelimit-remaining"), Some("2"));
    // No x-user-id: the rule does not match, Envoy sends no descriptor and asks nobody.
    assert_eq!(
        gw.statuses(OTHER_IP, "/users", &[], 5).await,
        expect(&[(200, None); 5]),
        "without x-user-id"
    );

    // x-plan exactly `free`: one bucket for every such request, 2 an hour; other plans pass.
    let (carol, dave) = (unique("carol"), unique("dave"));
    for (user, want) in [(&carol, (200, Some("1"))), (&dave, (200, Some("0")))] {
        let got = gw
            .statuses(
                OTHER_IP,
                "/plans",
                &[("x-plan", "free"), ("x-user-id", user)],
                1,
            )
            .await;
        assert_eq!(got, expect(&[want]), "free plan, {user}");
    }
    assert_eq!(
        gw.statuses(OTHER_IP, "/plans", &[("x-plan", "free")], 1)
            .await,
        expect(&[(429, Some("0"))]),
        "the free plan's shared bucket"
    );
    assert_eq!(
        gw.statuses(OTHER_IP, "/plans", &[("x-plan", "pro")], 3)
            .await,
        expect(&[(200, None); 3]),
        "x-plan: pro does not match"
    );

    // Source CIDR OFFICE_IP/32 (remote_address_match): 2 an hour; other clients unmatched.
    assert_eq!(
        gw.statuses(OFFICE_IP, "/office", &[], 3).await,
        expect(&[(200, Some("1")), (200, Some("0")), (429, Some("0"))]),
        "from the office"
    );
    assert_eq!(
        gw.statuses(OTHER_IP, "/office", &[], 3).await,
        expect(&[(200, None); 3]),
        "from elsewhere"
    );

    // Distinct source CIDR: each address inside it has 1 an hour; outside, unmatched.
    for ip in PER_IP_CLIENTS {
        assert_eq!(
            gw.statuses(ip, "/per-ip", &[], 2).await,
            expect(&[(200, Some("0")), (429, Some("0"))]),
            "per IP, {ip}; {}",
            ctx()
        );
    }
    assert_eq!(
        gw.statuses(OTHER_IP, "/per-ip", &[], 2).await,
        expect(&[(200, None); 2]),
        "outside the CIDR"
    );

    // Envoy Gateway ≤ 1.7's masked_remote_address: Envoy sends every client's masked address,
    // and only LEGACY_IP/32 has a limit.
    assert_eq!(
        gw.statuses(LEGACY_IP, "/legacy", &[], 3).await,
        expect(&[(200, Some("1")), (200, Some("0")), (429, Some("0"))]),
        "masked_remote_address, LEGACY_IP"
    );
    assert_eq!(
        gw.statuses(OTHER_IP, "/legacy", &[], 3).await,
        expect(&[(200, None); 3]),
        "masked_remote_address, another client"
    );

    // The policy changes: 1 an hour per user, over xDS; Envoy's answers follow it.
    let from = plane.received().len();
    plane.set("2", vec![eg_config(1)]);
    plane.wait_ack("2", from).await;
    let erin = unique("erin");
    let (status, h) = gw.get(OTHER_IP, "/users", &[("x-user-id", &erin)]).await;
    assert_eq!(status, 200, "{h:?}");
    assert_eq!(
        header(&h, "x-ratelimit-limit"),
        Some("1, 1;w=3600"),
        "{h:?}"
    );
    assert_eq!(
        gw.statuses(OTHER_IP, "/users", &[("x-user-id", &erin)], 1)
            .await,
        expect(&[(429, Some("0"))]),
        "the second request of the hour, at 1 an hour; {}",
        ctx()
    );

    let stats = envoy.ratelimit_stats("backend").await;
    assert_eq!(
        (stats.error, stats.failure_mode_allowed),
        (0, 0),
        "no call to tollgate failed: {stats:?}"
    );
    // Asked 16 times, 7 over the limit: never for a request no rule matched.
    assert_eq!(
        (stats.ok, stats.over_limit),
        (16, 7),
        "Envoy asked tollgate only when a rule matched: {stats:?}"
    );
}
