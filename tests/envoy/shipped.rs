//! The Envoy configs we ship, loaded and run by a real Envoy: `examples/envoy/envoy.yaml`
//! with only its addresses and ports changed, exercised route by route against
//! `examples/ratelimit.yaml` and `examples/llm-gateway.yaml`; and Istio's gateway patch (`deploy/istio/envoyfilter.yaml`) as
//! far as a bootstrap carries it: its filter before the router, its virtual host actions, and
//! the cluster Istio names, in front of `deploy/istio/ratelimit-config.yaml`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::pb::rls::RateLimitResponse;

use super::enforce::header;
use super::slots::{counts, generation, generation_with, wait_counts, Counts};
use crate::support::binary::Binary;
use crate::support::envoy::{admin, cluster, socket_address, validate, Backend, Envoy};
use crate::support::kit::avoid_window_edge;
use crate::support::server::{call, channel, descriptor, ports, request};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read_yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Writes `bootstrap` into Cargo's test scratch directory as `name`.
fn scratch(name: &str, bootstrap: &Value) -> PathBuf {
    let path =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{name}", std::process::id()));
    std::fs::write(&path, bootstrap.to_string()).expect("write a bootstrap");
    path
}

/// Every `socket_address` in `value` whose address and port are a key of `moves` goes to
/// `127.0.0.1` and the port given; any other is an error (nothing else is changed).
fn move_addresses(value: &mut Value, moves: &[((&str, u64), u16)]) {
    match value {
        Value::Object(map) => {
            if let Some(addr) = map.get_mut("socket_address") {
                let was = (
                    addr["address"].as_str().unwrap_or_default().to_string(),
                    addr["port_value"].as_u64().unwrap_or_default(),
                );
                let to = moves
                    .iter()
                    .find(|((a, p), _)| *a == was.0 && *p == was.1)
                    .unwrap_or_else(|| panic!("no new home for the socket address {was:?}"))
                    .1;
                *addr = json!({"address": "127.0.0.1", "port_value": to});
            }
            map.values_mut().for_each(|v| move_addresses(v, moves));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| move_addresses(v, moves)),
        _ => {}
    }
}

/// `tollgate serve` on the memory store with `config`.
async fn tollgate(config: &Path) -> Binary {
    Binary::serve(config, &[], None).await
}

/// `GET http://127.0.0.1:port{path}` from source address `from`: status and headers.
async fn get_from(
    from: &str,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap) {
    let client = reqwest::Client::builder()
        .local_address(from.parse::<IpAddr>().expect("an address"))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let mut req = client.request(
        method.parse().expect("method"),
        format!("http://127.0.0.1:{port}{path}"),
    );
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
    (resp.status().as_u16(), resp.headers().clone())
}

/// The shipped configs' filter timeout is 20 ms, and the first call opens Envoy's connection
/// to tollgate: until an answer carries Envoy's headers, calls may fail open. Sends `path`
/// from `from` (an address the test uses for nothing else) until one does.
async fn warm_up(listen: u16, from: &str, path: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, headers) = get_from(from, listen, "GET", path, &[]).await;
        if header(&headers, "x-ratelimit-limit").is_some() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Envoy never reached tollgate"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asks tollgate directly, charging nothing: the descriptor's remaining count.
async fn remaining(tollgate: &Binary, domain: &str, entries: &[(&str, &str)]) -> u32 {
    let mut d = descriptor(entries);
    d.hits_addend = Some(0);
    let addr = format!("127.0.0.1:{}", tollgate.grpc_port());
    let mut client = tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient::new(
        channel(addr.parse().expect("address")).await,
    );
    let resp: RateLimitResponse = call(&mut client, request(domain, vec![d])).await;
    resp.statuses[0]
        .current_limit
        .as_ref()
        .map_or(u32::MAX, |_| resp.statuses[0].limit_remaining)
}

#[test]
fn every_envoy_config_we_ship_loads_in_envoy() {
    validate(&repo("examples/envoy/envoy.yaml"))
        .unwrap_or_else(|e| panic!("examples/envoy/envoy.yaml: {e}"));
    let istio = scratch(
        "istio-gateway.yaml",
        &istio_bootstrap(10000, 9901, 8081, 8080),
    );
    validate(&istio).unwrap_or_else(|e| panic!("deploy/istio/envoyfilter.yaml's patch: {e}"));
}

/// A config directory holding `files` (paths in the repository), as one tollgate serves them.
fn config_dir(name: &str, files: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("config dir");
    for file in files {
        let to = dir.join(Path::new(file).file_name().expect("a file name"));
        std::fs::copy(repo(file), to).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_envoy_yaml_route_by_route() {
    // Domains edge (every route but /v1/generate) and llm-gateway (/v1/generate).
    let config = config_dir(
        "example-envoy-config",
        &["examples/ratelimit.yaml", "examples/llm-gateway.yaml"],
    );
    let tollgate = tollgate(&config).await;
    let [listen, admin_port] = ports::<2>();
    let mut bootstrap = read_yaml("examples/envoy/envoy.yaml");
    move_addresses(
        &mut bootstrap,
        &[
            (("0.0.0.0", 10000), listen),
            (("127.0.0.1", 9901), admin_port),
            (("tollgate", 8081), tollgate.grpc_port()),
            (("backend", 8000), Backend::get().port),
        ],
    );
    let envoy = Envoy::start(&bootstrap.to_string(), admin_port).await;
    warm_up(listen, "127.0.0.9", "/").await;
    let before = envoy.ratelimit_stats("backend").await;
    // Per-minute limits below: keep the whole test inside one minute.
    avoid_window_edge(Duration::from_secs(60), Duration::from_secs(20)).await;
    let get = |from: &'static str,
               method: &'static str,
               path: &'static str,
               h: &'static [(&'static str, &'static str)]| {
        get_from(from, listen, method, path, h)
    };

    // remote_address: 5 a second per client IP (each part below has an address of its own).
    avoid_window_edge(Duration::from_secs(1), Duration::from_millis(600)).await;
    for left in ["4", "3", "2", "1", "0"] {
        let (status, h) = get("127.0.0.2", "GET", "/", &[]).await;
        assert_eq!(status, 200, "per IP: {h:?}");
        assert_eq!(header(&h, "x-ratelimit-remaining"), Some(left), "per IP");
        assert_eq!(header(&h, "x-ratelimit-limit"), Some("5, 5;w=1"), "per IP");
    }
    assert_eq!(
        get("127.0.0.2", "GET", "/", &[]).await.0,
        429,
        "the 6th in a second"
    );

    // api_key: 10 a minute; "internal" unlimited.
    assert_eq!(
        get("127.0.0.3", "GET", "/", &[("x-api-key", "abc")])
            .await
            .0,
        200
    );
    assert_eq!(remaining(&tollgate, "edge", &[("api_key", "abc")]).await, 9);
    assert_eq!(
        get("127.0.0.3", "GET", "/", &[("x-api-key", "internal")])
            .await
            .0,
        200
    );
    assert_eq!(
        remaining(&tollgate, "edge", &[("api_key", "internal")]).await,
        u32::MAX,
        "unlimited"
    );

    // /batch/: a call costs 5 of the key's 10.
    for (i, left) in [5, 0].into_iter().enumerate() {
        let (status, h) = get(
            "127.0.0.4",
            "POST",
            "/batch/run",
            &[("x-api-key", "batchkey")],
        )
        .await;
        assert_eq!(status, 200, "batch call {}: {h:?}", i + 1);
        assert_eq!(
            remaining(&tollgate, "edge", &[("api_key", "batchkey")]).await,
            left
        );
    }
    let (status, h) = get(
        "127.0.0.4",
        "POST",
        "/batch/run",
        &[("x-api-key", "batchkey")],
    )
    .await;
    assert_eq!(status, 429, "a third batch does not fit: {h:?}");
    assert_eq!(header(&h, "x-ratelimit-remaining"), Some("0"));

    // user + method: 3 POSTs a minute per user, 30 other requests.
    for i in 0..3 {
        let status = get("127.0.0.5", "POST", "/", &[("x-user-id", "u1")])
            .await
            .0;
        assert_eq!(status, 200, "POST {}", i + 1);
    }
    assert_eq!(
        get("127.0.0.5", "POST", "/", &[("x-user-id", "u1")])
            .await
            .0,
        429
    );
    assert_eq!(
        get("127.0.0.6", "GET", "/", &[("x-user-id", "u1")]).await.0,
        200
    );
    assert_eq!(
        remaining(&tollgate, "edge", &[("user", "u1"), ("method", "GET")]).await,
        29
    );

    // /uploads/: every path shares one budget of 100 an hour.
    assert_eq!(get("127.0.0.7", "PUT", "/uploads/a.png", &[]).await.0, 200);
    assert_eq!(
        get("127.0.0.7", "PUT", "/uploads/b/c.png", &[]).await.0,
        200
    );
    assert_eq!(
        remaining(&tollgate, "edge", &[("path", "/uploads/other")]).await,
        98
    );

    // /v1/generate (domain llm-gateway): 8 generations of a model in flight, the 9th refused;
    // one that ends (or whose client goes away) gives its slot back through Envoy's call when
    // the stream is done, and the next one is admitted.
    let (url, model, domain) = (
        format!("http://127.0.0.1:{listen}/v1/generate"),
        "shipped-model",
        "llm-gateway",
    );
    let start = counts(&tollgate, domain).await;
    let mut running = Vec::new();
    for i in 0..8 {
        let g = generation(&url, model).await;
        running.push(g.unwrap_or_else(|s| panic!("generation {}: {s}", i + 1)));
    }
    let refused = generation(&url, model).await.err();
    assert_eq!(refused, Some(429), "a 9th while 8 are in flight");
    running.pop().expect("a generation").finish().await;
    let mut want = Counts {
        held: start.held + 1,
        calls: start.calls + 10,
        ..start
    };
    wait_counts("shipped", &tollgate, domain, want).await;
    running.push(generation(&url, model).await.expect("the freed slot"));
    let refused = generation(&url, model).await.err();
    assert_eq!(refused, Some(429), "8 in flight again");
    running.pop().expect("a generation").disconnect();
    want.held += 1;
    want.calls += 3;
    wait_counts("shipped", &tollgate, domain, want).await;
    for g in running {
        g.finish().await;
    }
    want.held += 7;
    want.calls += 7;
    wait_counts("shipped", &tollgate, domain, want).await;
    assert_eq!(want.not_held, 0, "every release named a slot");

    // /v1/chat (domain llm-gateway): a call reserves its x-max-tokens of the tenant's
    // 100,000 a minute at once, and Envoy's call when the stream is done settles it with the
    // tokens the response used; without x-max-tokens it reserves the default (4,096).
    let url = format!("http://127.0.0.1:{listen}/v1/chat");
    let tenant = [("tenant_reserved_tokens", "shipped-tenant")];
    avoid_window_edge(Duration::from_secs(60), Duration::from_secs(15)).await;
    let g = generation_with(
        &url,
        &[
            ("x-tenant", "shipped-tenant"),
            ("x-max-tokens", "3000"),
            ("x-completion-tokens", "1200"),
        ],
    )
    .await
    .expect("a call within the budget");
    assert_eq!(remaining(&tollgate, "llm-gateway", &tenant).await, 97_000);
    g.finish().await;
    wait_remaining(&tollgate, "llm-gateway", &tenant, 98_800).await;
    let g = generation_with(
        &url,
        &[
            ("x-tenant", "shipped-tenant"),
            ("x-completion-tokens", "100"),
        ],
    )
    .await
    .expect("the default estimate fits");
    assert_eq!(
        remaining(&tollgate, "llm-gateway", &tenant).await,
        98_800 - 4096
    );
    g.finish().await;
    wait_remaining(&tollgate, "llm-gateway", &tenant, 98_700).await;

    let stats = envoy.ratelimit_stats("backend").await - before;
    assert_eq!(
        (stats.error, stats.failure_mode_allowed),
        (0, 0),
        "no call failed (a failure would have let its request through): {stats:?}"
    );
}

/// Waits (up to 5 s) until the descriptor's remaining count is `want` (Envoy's stream-done
/// call comes after the client's last byte).
async fn wait_remaining(tollgate: &Binary, domain: &str, entries: &[(&str, &str)], want: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = remaining(tollgate, domain, entries).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{domain} {entries:?}: {got} remaining, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A bootstrap carrying `deploy/istio/envoyfilter.yaml`'s patches as Istio applies them to the
/// ingress gateway: the HTTP filter inserted before the router, the actions merged into the
/// gateway's virtual host `*:80`, and the rate limit service under the cluster name Istio
/// builds for the `ratelimit` Service.
fn istio_bootstrap(listen: u16, admin_port: u16, rls_port: u16, backend_port: u16) -> Value {
    let filter = read_yaml("deploy/istio/envoyfilter.yaml");
    let patches = filter["spec"]["configPatches"]
        .as_array()
        .expect("configPatches");
    let patch = |applies_to: &str| {
        patches
            .iter()
            .find(|p| p["applyTo"] == applies_to)
            .unwrap_or_else(|| panic!("no {applies_to} patch"))
            .clone()
    };
    let http_filter = patch("HTTP_FILTER");
    assert_eq!(http_filter["patch"]["operation"], "INSERT_BEFORE");
    assert_eq!(
        http_filter["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"],
        "envoy.filters.http.router"
    );
    let vhost_patch = patch("VIRTUAL_HOST");
    assert_eq!(vhost_patch["patch"]["operation"], "MERGE");
    let vhost_name = vhost_patch["match"]["routeConfiguration"]["vhost"]["name"]
        .as_str()
        .expect("the patched virtual host's name");
    let rls_cluster = http_filter["patch"]["value"]["typed_config"]["rate_limit_service"]
        ["grpc_service"]["envoy_grpc"]["cluster_name"]
        .as_str()
        .expect("the filter's cluster");

    let mut vhost = json!({
        "name": vhost_name,
        "domains": ["*"],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "backend"}}],
    });
    for (k, v) in vhost_patch["patch"]["value"]
        .as_object()
        .expect("a MERGE value")
    {
        vhost[k] = v.clone();
    }
    json!({
        "admin": admin(admin_port),
        "static_resources": {
            "listeners": [{
                "name": "gateway",
                "address": socket_address(listen),
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "gateway",
                        "route_config": {"virtual_hosts": [vhost]},
                        "http_filters": [
                            http_filter["patch"]["value"],
                            {
                                "name": "envoy.filters.http.router",
                                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                            },
                        ],
                    },
                }]}],
            }],
            "clusters": [cluster(rls_cluster, rls_port, true), cluster("backend", backend_port, false)],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istios_gateway_patch_enforces_the_configmap() {
    let configmap = read_yaml("deploy/istio/ratelimit-config.yaml");
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("istio-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("config dir");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        configmap["data"]["config.yaml"]
            .as_str()
            .expect("config.yaml in the ConfigMap"),
    )
    .expect("write the config");
    let tollgate = tollgate(&config).await;
    let [listen, admin_port] = ports::<2>();
    let bootstrap = istio_bootstrap(
        listen,
        admin_port,
        tollgate.grpc_port(),
        Backend::get().port,
    );
    let envoy = Envoy::start(&bootstrap.to_string(), admin_port).await;
    warm_up(listen, "127.0.0.1", "/warm-up").await;
    let before = envoy.ratelimit_stats("backend").await;
    avoid_window_edge(Duration::from_secs(60), Duration::from_secs(10)).await;
    for left in ["4", "3", "2", "1", "0"] {
        let (status, h) = get_from("127.0.0.1", listen, "GET", "/productpage", &[]).await;
        assert_eq!(status, 200, "{h:?}");
        assert_eq!(header(&h, "x-ratelimit-remaining"), Some(left));
    }
    let (status, h) = get_from("127.0.0.1", listen, "GET", "/productpage", &[]).await;
    assert_eq!(status, 429, "{h:?}");
    let (status, h) = get_from("127.0.0.1", listen, "GET", "/reviews", &[]).await;
    assert_eq!(status, 200, "another path has its own count: {h:?}");
    assert_eq!(header(&h, "x-ratelimit-limit"), Some("100, 100;w=60"));
    let stats = envoy.ratelimit_stats("backend").await - before;
    assert_eq!(
        (stats.ok, stats.over_limit, stats.error),
        (6, 1, 0),
        "{stats:?}"
    );
}
