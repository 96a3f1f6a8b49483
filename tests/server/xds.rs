//! tollgate in Envoy Gateway's place: the binary run as `ratelimit` with only the environment
//! Envoy Gateway's rate limit Deployment sets (test ports, backoff and certificates aside),
//! fed by a control plane of the test's own (`support::xds`) over mutual TLS, serving gRPC
//! over mutual TLS: it starts without a config and picks one up, enforces it, replaces it on
//! an update, NACKs a bad update while the old config keeps enforcing, rides out the control
//! plane's death and comes back to it, and takes a thousand domains in one update.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::metrics::{scrape_url, value};
use crate::support::binary::{ratelimit_symlink, Binary, Start, BIN};
use crate::support::pki::Pki;
use crate::support::redis::RedisServer;
use crate::support::server::*;
use crate::support::xds::{domain, limit, nest, ControlPlane, PlaneTls, HOUR, MINUTE};

/// Envoy Gateway's listener-named domain, and its generic key naming a route rule.
const DOMAIN: &str = "default/eg/http";
const RULE: &str = "httproute/default/backend/rule/0/match/0/www_example_com";

/// A rule as Envoy Gateway writes it: a generic key naming the route rule, then the match
/// (here an `x-user-id` header, each value its own bucket).
fn user_rule(per_unit: u32, unit: i32) -> tollgate::pb::rls_conf::RateLimitDescriptor {
    nest(
        RULE,
        RULE,
        vec![limit("rule-0-match-0", "", unit, per_unit)],
    )
}

fn user_request(domain: &str, user: &str) -> RateLimitRequest {
    req(domain, &[&[(RULE, RULE), ("rule-0-match-0", user)]])
}

/// What Envoy Gateway's rate limit Deployment runs (its own testdata, copied into
/// `tests/fixtures/envoy-gateway/ratelimit-deployment.yaml`).
struct EgDeployment {
    command: Vec<String>,
    env: Vec<(String, String)>,
    /// The readiness probe's path and port.
    probe: (String, u16),
}

impl EgDeployment {
    fn read() -> EgDeployment {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/envoy-gateway/ratelimit-deployment.yaml"
        );
        let text = std::fs::read_to_string(path).expect("Envoy Gateway's Deployment");
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
        let c = &doc["spec"]["template"]["spec"]["containers"][0];
        let str_of = |v: &serde_yaml::Value| v.as_str().expect("a string").to_string();
        EgDeployment {
            command: c["command"]
                .as_sequence()
                .expect("command")
                .iter()
                .map(str_of)
                .collect(),
            env: c["env"]
                .as_sequence()
                .expect("env")
                .iter()
                .map(|e| (str_of(&e["name"]), str_of(&e["value"])))
                .collect(),
            probe: (
                str_of(&c["readinessProbe"]["httpGet"]["path"]),
                c["readinessProbe"]["httpGet"]["port"]
                    .as_u64()
                    .expect("port") as u16,
            ),
        }
    }
}

/// `setpriv` running `program` as uid and gid 65534, when this test runs as root and
/// `setpriv` is installed.
fn as_nobody(program: &Path) -> Option<(PathBuf, Vec<String>)> {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").ok()?.uid() == 0;
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())?;
    root.then(|| {
        let args = ["--reuid=65534", "--regid=65534", "--clear-groups"]
            .iter()
            .map(|s| s.to_string())
            .chain([program.display().to_string()])
            .collect();
        (setpriv, args)
    })
}

/// A gRPC client presenting the test's client certificate, as Envoy Gateway's proxies
/// present theirs.
async fn mtls_client(pki: &Pki, port: u16, identity: bool) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pki.read("ca.crt")))
        .domain_name("localhost");
    if identity {
        tls = tls.identity(Identity::from_pem(
            pki.read("client.crt"),
            pki.read("client.key"),
        ));
    }
    Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .tls_config(tls)
        .map_err(|e| format!("{e:?}"))?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

async fn decide(
    client: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(r)
        .await
        .map(tonic::Response::into_inner)
        .unwrap_or_else(|e| panic!("ShouldRateLimit failed: {e:?}"))
}

/// Codes of `ShouldRateLimit` answers, for `n` calls of `r`.
async fn codes(
    client: &mut RateLimitServiceClient<Channel>,
    r: impl Fn() -> RateLimitRequest,
    n: usize,
) -> Vec<i32> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(decide(client, r()).await.overall_code);
    }
    out
}

async fn rlconfig(debug_port: u16) -> (Option<String>, String) {
    let resp = http_client()
        .get(format!("http://127.0.0.1:{debug_port}/rlconfig"))
        .send()
        .await
        .expect("GET /rlconfig");
    let version = resp
        .headers()
        .get("x-tollgate-config-version")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (version, resp.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_as_envoy_gateway_deploys_envoyproxy_ratelimit() {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let pki = tokio::task::block_in_place(Pki::make);
    let scratch = TempConfig::new("");
    // Envoy Gateway's xDS server: mutual TLS, its clients' certificates from the same CA.
    let mut plane = ControlPlane::start(Some(PlaneTls {
        cert: pki.read("server.crt"),
        key: pki.read("server.key"),
        client_ca: Some(pki.read("ca.crt")),
    }));
    let program = ratelimit_symlink(&scratch.dir);
    let [http_port, grpc_port, debug_port, prom_port] = ports::<4>();
    let s = |p: &Path| p.display().to_string();
    // Envoy Gateway's Deployment, verbatim but for what a test must choose: the paths of the
    // mounted certificates (one certificate serves gRPC and dials the control plane, as
    // Envoy Gateway's does), the control plane's and Redis' addresses, the ports, and the
    // backoff.
    let deployment = EgDeployment::read();
    assert_eq!(deployment.command, ["/bin/ratelimit"]);
    assert_eq!(deployment.probe, ("/healthcheck".to_string(), 8080));
    let replace = |name: &str, value: &str| -> String {
        match (name, value) {
            (_, "/certs/tls.crt") => s(&pki.path("both.crt")),
            (_, "/certs/tls.key") => s(&pki.path("both.key")),
            (_, "/certs/ca.crt") => s(&pki.path("ca.crt")),
            ("CONFIG_GRPC_XDS_SERVER_URL", _) => format!("localhost:{}", plane.addr.port()),
            ("REDIS_URL", _) => format!("127.0.0.1:{}", redis.port()),
            ("RUNTIME_ROOT", _) => s(&scratch.dir.join("data")),
            ("PROMETHEUS_ADDR", _) => format!(":{prom_port}"),
            // The ConfigMap is optional and not there.
            ("PROMETHEUS_MAPPER_YAML", _) => s(&scratch.dir.join("statsd-exporter/conf.yaml")),
            _ => value.to_string(),
        }
    };
    let mut env: Vec<(String, String)> = deployment
        .env
        .iter()
        .map(|(k, v)| (k.clone(), replace(k, v)))
        .collect();
    for (k, v) in [
        ("PORT", http_port.to_string()),
        ("GRPC_PORT", grpc_port.to_string()),
        ("DEBUG_PORT", debug_port.to_string()),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".into()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "400ms".into()),
    ] {
        env.push((k.into(), v));
    }
    // Envoy Gateway runs it as user 65534 on a read-only root filesystem. When the test runs
    // as root it does the same (setpriv), so the process can write to no file here.
    let (runner, args) = match as_nobody(&program) {
        Some((setpriv, args)) => {
            for name in ["both.key", "both.crt", "ca.crt"] {
                std::fs::set_permissions(pki.path(name), std::fs::Permissions::from_mode(0o644))
                    .expect("chmod");
            }
            (setpriv, args)
        }
        None => (program.clone(), Vec::new()),
    };
    let mut binary = Binary::start(Start {
        program: &runner,
        args,
        env,
        clear_env: true,
        grpc_port,
        http_port,
        log_path: Some(scratch.dir.join("ratelimit.log")),
    })
    .await;
    binary.wait_ready().await;
    let log = || binary.log();

    // Serving before any config (FORCE_START_WITHOUT_INITIAL_CONFIG): Kubernetes' probe
    // passes, and every domain is unknown, answered OK.
    let probe = http_client()
        .get(format!("http://127.0.0.1:{http_port}/healthcheck"))
        .send()
        .await
        .expect("GET /healthcheck");
    assert_eq!(probe.status(), 200, "log: {}", log());
    let channel = mtls_client(&pki, grpc_port, true)
        .await
        .unwrap_or_else(|e| panic!("mTLS connect: {e}; log: {}", log()));
    let mut client = RateLimitServiceClient::new(channel);
    assert_eq!(
        codes(&mut client, || user_request(DOMAIN, "alice"), 3).await,
        [OK; 3]
    );
    // A client without a certificate is refused (GRPC_SERVER_TLS_CA_CERT verifies clients).
    let anonymous = match mtls_client(&pki, grpc_port, false).await {
        Ok(ch) => RateLimitServiceClient::new(ch)
            .should_rate_limit(user_request(DOMAIN, "alice"))
            .await
            .map(|_| ())
            .map_err(|e| format!("{e:?}")),
        Err(e) => Err(e),
    };
    assert!(
        anonymous.is_err(),
        "answered a client without a certificate"
    );

    // The first config: asked for as node envoy-ratelimit, applied, ACKed, enforced.
    plane.set("1", vec![domain(DOMAIN, vec![user_rule(2, HOUR)])]);
    let ack = plane.wait_ack("1", 0).await;
    let node = ack.request.node.as_ref().expect("node");
    assert_eq!(node.id, "envoy-ratelimit");
    assert_eq!(ack.request.type_url, crate::support::xds::TYPE_URL);
    assert_eq!(
        codes(&mut client, || user_request(DOMAIN, "alice"), 3).await,
        [OK, OK, OVER_LIMIT],
        "log: {}",
        log()
    );
    // Each x-user-id value is its own bucket.
    assert_eq!(
        codes(&mut client, || user_request(DOMAIN, "bob"), 1).await,
        [OK]
    );
    let (version, body) = rlconfig(debug_port).await;
    assert_eq!(version.as_deref(), Some("1"), "{body}");
    assert!(body.contains(DOMAIN), "{body}");

    // An update replaces the whole set: the old domain is gone (OK, unlimited), the new
    // one enforces.
    let from = plane.received().len();
    plane.set(
        "2",
        vec![domain("default/eg/https", vec![user_rule(3, MINUTE)])],
    );
    plane.wait_ack("2", from).await;
    assert_eq!(
        codes(&mut client, || user_request(DOMAIN, "alice"), 2).await,
        [OK; 2]
    );
    assert_eq!(
        codes(&mut client, || user_request("default/eg/https", "carol"), 4).await,
        [OK, OK, OK, OVER_LIMIT]
    );

    // A bad update is NACKed, naming the domain and the fault; version 2 keeps enforcing.
    let from = plane.received().len();
    let mut bad = user_rule(5, HOUR);
    bad.descriptors[0].rate_limit.as_mut().expect("limit").unit = 0;
    plane.set(
        "3",
        vec![
            domain("default/eg/https", vec![user_rule(9, HOUR)]),
            domain("default/eg/broken", vec![bad]),
        ],
    );
    let nack = plane.wait_nack(from).await;
    let message = nack.nack().expect("NACK");
    assert!(
        message.contains("default/eg/broken") && message.contains("unit"),
        "the NACK does not name the domain and the fault: {message}"
    );
    assert_eq!(
        nack.request.version_info, "2",
        "a NACK carries the version last applied"
    );
    assert_eq!(nack.request.error_detail.as_ref().map(|s| s.code), Some(3));
    assert_eq!(
        codes(&mut client, || user_request("default/eg/https", "carol"), 1).await,
        [OVER_LIMIT],
        "the rejected update changed the running limits; log: {}",
        log()
    );
    assert_eq!(rlconfig(debug_port).await.0.as_deref(), Some("2"));

    // The control plane dies: limits stay. It comes back with a new version: picked up, and
    // the new stream starts from the version last applied.
    plane.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        codes(&mut client, || user_request("default/eg/https", "dave"), 4).await,
        [OK, OK, OK, OVER_LIMIT],
        "limits changed while the control plane was down; log: {}",
        log()
    );
    let metrics = format!("http://127.0.0.1:{prom_port}/metrics");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let scrape = loop {
        let scrape = scrape_url(&metrics).await;
        if value(&scrape, "tollgate_config_xds_connected", &[]) == 0.0 {
            break scrape;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream still counts as connected; log: {}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(value(&scrape, "tollgate_config_xds_nacks_total", &[]), 1.0);
    let from = plane.received().len();
    plane.set(
        "4",
        vec![domain("default/eg/https", vec![user_rule(1, HOUR)])],
    );
    plane.restart();
    let hello = plane
        .wait_for(
            "a new stream's first request",
            from,
            Duration::from_secs(15),
            |r| r.request.response_nonce.is_empty(),
        )
        .await;
    assert_eq!(
        hello.request.version_info, "2",
        "a new stream starts from the version applied"
    );
    plane.wait_ack("4", from).await;
    assert_eq!(
        codes(&mut client, || user_request("default/eg/https", "erin"), 2).await,
        [OK, OVER_LIMIT]
    );
    let scrape = scrape_url(&metrics).await;
    assert_eq!(value(&scrape, "tollgate_config_xds_connected", &[]), 1.0);
    assert_eq!(
        value(&scrape, "tollgate_config_xds_version", &[("version", "4")]),
        1.0
    );

    // A thousand domains in one update.
    let from = plane.received().len();
    let many: Vec<_> = (0..1000)
        .map(|i| domain(&format!("ns-{i}/eg/http"), vec![user_rule(1 + i % 7, HOUR)]))
        .collect();
    plane.set("5", many);
    plane.wait_ack("5", from).await;
    for i in [0u32, 1, 499, 998, 999] {
        let d = format!("ns-{i}/eg/http");
        let want = 1 + i % 7;
        let got = codes(&mut client, || user_request(&d, "frank"), want as usize + 1).await;
        assert_eq!(
            got.iter().filter(|c| **c == OK).count(),
            want as usize,
            "{d}: {got:?}"
        );
        assert_eq!(got.last(), Some(&OVER_LIMIT), "{d}: {got:?}");
    }
    let (version, body) = rlconfig(debug_port).await;
    assert_eq!(version.as_deref(), Some("5"));
    assert!(body.contains("ns-0/eg/http") && body.contains("ns-999/eg/http"));

    // The missing PROMETHEUS_MAPPER_YAML file is one log line, not a failure; nothing
    // else went wrong.
    let text = log();
    assert!(
        text.matches("PROMETHEUS_MAPPER_YAML").count() == 1,
        "expected one line about the missing mapper file: {text}"
    );
    drop(plane);
}

/// The native flags, TLS with the server's name set by `--config-xds-san`: without
/// `--config-xds-start-without-config` nothing listens until the first config arrives; the
/// node metadata and extra headers reach the control plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_the_first_config_and_sends_node_metadata_and_headers() {
    let pki = tokio::task::block_in_place(Pki::make);
    let scratch = TempConfig::new("");
    let plane = ControlPlane::start(Some(PlaneTls {
        cert: pki.read("server.crt"),
        key: pki.read("server.key"),
        client_ca: None,
    }));
    let [grpc_port, http_port] = ports::<2>();
    let s = |p: PathBuf| p.display().to_string();
    let args: Vec<String> = [
        "serve".to_string(),
        "--config-xds".into(),
        // The certificate names localhost, not this address: the SAN option names it.
        format!("https://127.0.0.1:{}", plane.addr.port()),
        "--config-xds-ca".into(),
        s(pki.path("ca.crt")),
        "--config-xds-san".into(),
        "localhost".into(),
        "--config-xds-node-id".into(),
        "tollgate-test".into(),
        "--config-xds-node-metadata".into(),
        "cluster:eu-1,zone=b".into(),
        "--config-xds-headers".into(),
        "x-tenant:acme".into(),
        "--grpc-addr".into(),
        format!("127.0.0.1:{grpc_port}"),
        "--http-addr".into(),
        format!("127.0.0.1:{http_port}"),
    ]
    .into();
    let log_path = scratch.dir.join("tollgate.log");
    let start = tokio::spawn(Binary::start(Start {
        program: Path::new(BIN),
        args,
        env: Vec::new(),
        clear_env: true,
        grpc_port,
        http_port,
        log_path: Some(log_path.clone()),
    }));

    let hello = plane
        .wait_for("the first request", 0, Duration::from_secs(15), |_| true)
        .await;
    let node = hello.request.node.as_ref().expect("node");
    assert_eq!(node.id, "tollgate-test");
    let metadata = node.metadata.as_ref().expect("metadata");
    let text = |k: &str| match metadata.fields.get(k).and_then(|v| v.kind.as_ref()) {
        Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
        other => panic!("metadata {k}: {other:?}"),
    };
    assert_eq!((text("cluster"), text("zone")), ("eu-1".into(), "b".into()));
    assert!(
        hello
            .headers
            .iter()
            .any(|(k, v)| k == "x-tenant" && v == "acme"),
        "{:?}",
        hello.headers
    );
    // No config yet: neither listener is open.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", grpc_port)).is_err(),
        "gRPC listens before the first config; log: {}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    assert!(!start.is_finished());

    plane.set(
        "v1",
        vec![domain("api", vec![limit("tenant", "", HOUR, 1)])],
    );
    let mut binary = bounded("the start after the first config", start)
        .await
        .expect("start");
    plane.wait_ack("v1", 0).await;
    binary.wait_ready().await;
    let mut client = RateLimitServiceClient::new(
        channel(format!("127.0.0.1:{grpc_port}").parse().expect("addr")).await,
    );
    assert_eq!(
        codes(&mut client, || req("api", &[&[("tenant", "t1")]]), 2).await,
        [OK, OVER_LIMIT],
        "log: {}",
        binary.log()
    );
}

/// `FORCE_START_WITHOUT_INITIAL_CONFIG` with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, the
/// control plane down at the start: the service serves (OK to all), the health check fails
/// until a config arrives, and passes once the control plane is up and has sent one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_waits_for_a_config_when_asked_to() {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let redis_url = format!("127.0.0.1:{}", redis.port());
    let scratch = TempConfig::new("");
    let mut plane = ControlPlane::start(None);
    plane.kill();
    let [http_port, grpc_port, debug_port] = ports::<3>();
    let env: Vec<(String, String)> = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        (
            "CONFIG_GRPC_XDS_SERVER_URL",
            &format!("127.0.0.1:{}", plane.addr.port()),
        ),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ("REDIS_URL", &redis_url),
        ("USE_STATSD", "false"),
        ("PORT", &http_port.to_string()),
        ("GRPC_PORT", &grpc_port.to_string()),
        ("DEBUG_PORT", &debug_port.to_string()),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "50ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let binary = Binary::as_ratelimit(&scratch.dir, env, grpc_port, http_port).await;
    let health = || async {
        http_client()
            .get(format!("http://127.0.0.1:{http_port}/healthcheck"))
            .send()
            .await
            .expect("GET /healthcheck")
            .status()
            .as_u16()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(
        health().await,
        200,
        "healthy without a config; log: {}",
        binary.log()
    );
    let mut client = RateLimitServiceClient::new(
        channel(format!("127.0.0.1:{grpc_port}").parse().expect("addr")).await,
    );
    assert_eq!(
        codes(&mut client, || req("api", &[&[("tenant", "t1")]]), 2).await,
        [OK, OK]
    );

    plane.set(
        "1",
        vec![domain("api", vec![limit("tenant", "", MINUTE, 1)])],
    );
    plane.restart();
    plane.wait_ack("1", 0).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while health().await != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never healthy; log: {}",
            binary.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        codes(&mut client, || req("api", &[&[("tenant", "t1")]]), 2).await,
        [OK, OVER_LIMIT]
    );
}

fn yaml(path: &str) -> serde_yaml::Value {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// Helm's merge of values files: maps merge key by key, anything else is replaced.
fn helm_merge(base: &mut serde_yaml::Value, over: &serde_yaml::Value) {
    match (base, over) {
        (serde_yaml::Value::Mapping(b), serde_yaml::Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) => helm_merge(existing, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// The Envoy Gateway config we ship (`deploy/envoy-gateway/`, quoted by the README): merged
/// into the chart's defaults it is the ConfigMap we ship for installs without Helm, and it
/// differs from the defaults only by the rate limit image and the Redis.
#[test]
fn the_envoy_gateway_config_swaps_only_the_image_and_adds_redis() {
    let defaults = yaml("tests/fixtures/envoy-gateway/gateway-helm-values.yaml");
    let ours = yaml("deploy/envoy-gateway/values.yaml");
    let mut merged = defaults.clone();
    helm_merge(&mut merged, &ours);
    let merged = &merged["config"]["envoyGateway"];

    let configmap = yaml("deploy/envoy-gateway/envoy-gateway-config.yaml");
    assert_eq!(configmap["metadata"]["name"], "envoy-gateway-config");
    let text = configmap["data"]["envoy-gateway.yaml"]
        .as_str()
        .expect("data.envoy-gateway.yaml");
    let mut eg: serde_yaml::Value = serde_yaml::from_str(text).expect("EnvoyGateway");
    assert_eq!(eg["apiVersion"], "gateway.envoyproxy.io/v1alpha1");
    assert_eq!(eg["kind"], "EnvoyGateway");
    let m = eg.as_mapping_mut().expect("a map");
    m.remove("apiVersion");
    m.remove("kind");
    assert_eq!(&eg, merged, "the ConfigMap and the Helm values disagree");

    // What differs from Envoy Gateway's defaults: the image, and the Redis global rate
    // limiting needs. Everything else is the chart's.
    let image = &merged["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["image"];
    assert!(
        image.as_str().is_some_and(|i| i.contains("tollgate")),
        "{image:?}"
    );
    assert_eq!(merged["rateLimit"]["backend"]["type"], "Redis");
    let mut back = merged.clone();
    let m = back.as_mapping_mut().expect("a map");
    m.remove("rateLimit");
    m["provider"]
        .as_mapping_mut()
        .expect("provider")
        .remove("kubernetes");
    assert_eq!(&back, &defaults["config"]["envoyGateway"]);

    // The README quotes the values file.
    let values = std::fs::read_to_string(format!(
        "{}/deploy/envoy-gateway/values.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("values.yaml");
    let excerpt: String = values
        .lines()
        .skip_while(|l| !l.starts_with("config:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let readme = std::fs::read_to_string(format!("{}/README.md", env!("CARGO_MANIFEST_DIR")))
        .expect("README.md");
    assert!(
        readme.contains(&excerpt),
        "README.md does not quote deploy/envoy-gateway/values.yaml:\n{excerpt}"
    );
}

/// Every variable of Envoy Gateway's Deployment is in docs/compatibility.md's table.
#[test]
fn every_variable_envoy_gateway_sets_is_documented() {
    let doc = std::fs::read_to_string(format!(
        "{}/docs/compatibility.md",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("docs/compatibility.md");
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
    let missing: Vec<String> = EgDeployment::read()
        .env
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| {
            !rows.iter().any(|row| {
                row.split(" | ")
                    .next()
                    .is_some_and(|c| c.contains(&format!("`{k}`")))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/compatibility.md's table: {missing:?}"
    );
}
