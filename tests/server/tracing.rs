//! Traces from outside: the binary, started with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an
//! OTLP receiver in this test (a tonic server built from `opentelemetry-proto`, or an HTTP one
//! taking `POST /v1/traces` protobuf bodies), continues the caller's trace from its
//! `traceparent` metadata, with a child span per Redis round trip, and never puts a descriptor
//! value in a span. Run as `ratelimit` with the tracing environment Envoy Gateway's Deployment
//! sets (`tests/fixtures/envoy-gateway/ratelimit-deployment-tracing.yaml`), it exports over
//! OTLP/HTTP as that service, and `TRACING_SAMPLING_RATE=0` samples only callers' traces.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;

use crate::support::binary::{Binary, Start, BIN};
use crate::support::redis::RedisServer;
use crate::support::server::{channel, free_port, req, TempConfig};

#[derive(Default, Clone)]
struct Receiver {
    requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    /// The `content-type` of each OTLP/HTTP export.
    http_posts: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Every span received so far, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for r in requests.iter() {
            for rs in &r.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|res| {
                        res.attributes
                            .iter()
                            .find(|kv| kv.key == "service.name")
                            .map(|kv| format!("{:?}", kv.value))
                    })
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for span in &ss.spans {
                        out.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        out
    }
}

impl Receiver {
    fn push(&self, request: ExportTraceServiceRequest) {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request);
    }

    /// Every span received so far, with its resource's string attributes.
    fn spans_with_resource(&self) -> Vec<(BTreeMap<String, String>, Span)> {
        let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for rs in requests.iter().flat_map(|r| &r.resource_spans) {
            let resource: BTreeMap<String, String> = rs
                .resource
                .iter()
                .flat_map(|res| &res.attributes)
                .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    Value::StringValue(v) => Some((kv.key.clone(), v.clone())),
                    _ => None,
                })
                .collect();
            for span in rs.scope_spans.iter().flat_map(|ss| &ss.spans) {
                out.push((resource.clone(), span.clone()));
            }
        }
        out
    }
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`.
async fn start_http_receiver() -> (SocketAddr, Receiver) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let receiver = Receiver::default();
    let r = receiver.clone();
    let export = move |headers: http::HeaderMap, body: bytes::Bytes| async move {
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        r.http_posts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(content_type);
        match ExportTraceServiceRequest::decode(body) {
            Ok(request) => {
                r.push(request);
                (
                    http::StatusCode::OK,
                    [(http::header::CONTENT_TYPE, "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
            Err(_) => (
                http::StatusCode::BAD_REQUEST,
                [(http::header::CONTENT_TYPE, "text/plain")],
                b"not an ExportTraceServiceRequest".to_vec(),
            ),
        }
    };
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(export));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, receiver)
}

async fn start_receiver() -> (SocketAddr, Receiver) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let receiver = Receiver::default();
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    (addr, receiver)
}

const CONFIG: &str = "\
domain: traced
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shared
    rate_limit: {unit: minute, requests_per_unit: 100, shared: true}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_continues_the_callers_trace_with_a_span_per_redis_round_trip() {
    let (otlp, receiver) = start_receiver().await;
    let redis = tokio::task::block_in_place(RedisServer::start);
    let config = TempConfig::new(CONFIG);
    let (grpc_port, http_port) = (free_port(), free_port());
    let mut binary = Binary::start(Start {
        program: Path::new(BIN),
        args: vec![
            "serve".into(),
            "--config".into(),
            config.path().display().to_string(),
            "--grpc-addr".into(),
            format!("127.0.0.1:{grpc_port}"),
            "--http-addr".into(),
            format!("127.0.0.1:{http_port}"),
            "--redis-url".into(),
            redis.url(),
            "--redis-timeout".into(),
            "500ms".into(),
        ],
        env: vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                format!("http://{otlp}"),
            ),
            ("OTEL_SERVICE_NAME".into(), "tollgate-under-test".into()),
            // Only callers' sampled traces are continued: proves the parent is read.
            (
                "OTEL_TRACES_SAMPLER".into(),
                "parentbased_always_off".into(),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
        ],
        clear_env: true,
        grpc_port,
        http_port,
        log_path: Some(config.dir.join("tollgate.log")),
    })
    .await;
    binary.wait_ready().await;

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let addr: SocketAddr = format!("127.0.0.1:{grpc_port}").parse().expect("addr");
    let mut client = RateLimitServiceClient::new(channel(addr).await);
    let secret = "secret-tenant-4711";
    let mut traced =
        tonic::Request::new(req("traced", &[&[("tenant", secret)], &[("shared", "x")]]));
    traced.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{parent_id}-01")
            .parse()
            .expect("metadata"),
    );
    client.should_rate_limit(traced).await.expect("answer");
    // Not sampled by the caller: exported by nobody.
    client
        .should_rate_limit(tonic::Request::new(req(
            "traced",
            &[&[("tenant", "other")]],
        )))
        .await
        .expect("answer");

    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let deadline = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = receiver.spans();
        let children = spans
            .iter()
            .filter(|(_, s)| s.name.starts_with("redis"))
            .count();
        if spans.iter().any(|(_, s)| s.name == "ShouldRateLimit") && children >= 1 {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "no trace arrived: {spans:?}; log: {}",
            binary.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let root = spans
        .iter()
        .find(|(_, s)| s.name == "ShouldRateLimit")
        .map(|(service, s)| (service.clone(), s.clone()))
        .expect("server span");
    assert!(
        root.0.contains("tollgate-under-test"),
        "service name: {}",
        root.0
    );
    assert_eq!(
        hex(&root.1.trace_id),
        trace_id,
        "the caller's trace goes on"
    );
    assert_eq!(
        hex(&root.1.parent_span_id),
        parent_id,
        "under the caller's span"
    );
    for (_, s) in &spans {
        assert_eq!(hex(&s.trace_id), trace_id, "only the sampled trace: {s:?}");
        if s.name.starts_with("redis") {
            assert_eq!(s.parent_span_id, root.1.span_id, "Redis spans are children");
        }
        let text = format!("{:?}", s.attributes);
        assert!(!text.contains(secret), "a descriptor value in {text}");
    }
    // On one node the tenant's limit and the shared limit are one group: one round trip.
    let redis_spans: Vec<_> = spans
        .iter()
        .filter(|(_, s)| s.name.starts_with("redis"))
        .collect();
    assert_eq!(redis_spans.len(), 1, "{redis_spans:?}");
    let charges = format!("{:?}", redis_spans[0].1.attributes);
    assert!(
        charges.contains(
            r#"key: "tollgate.charges", value: Some(AnyValue { value: Some(IntValue(2))"#
        ),
        "both charges in the one call: {charges}"
    );
    drop(binary);
}

/// The pod name Kubernetes gives `TRACING_SERVICE_INSTANCE_ID` (`fieldRef: metadata.name`).
const POD_NAME: &str = "envoy-ratelimit-6f9c8d7b5-x2k4q";

/// The tracing variables of Envoy Gateway's Deployment with tracing on (those its default
/// Deployment lacks), `fieldRef: metadata.name` resolved to [`POD_NAME`].
fn envoy_gateway_tracing_env() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/envoy-gateway/ratelimit-deployment-tracing.yaml"
    );
    let text = std::fs::read_to_string(path).expect("Envoy Gateway's tracing Deployment");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    let env = doc["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .expect("env");
    let vars: Vec<(String, String)> = env
        .iter()
        .map(|e| {
            let name = e["name"].as_str().expect("name").to_string();
            let value = match e["value"].as_str() {
                Some(v) => v.to_string(),
                None => {
                    let field = e["valueFrom"]["fieldRef"]["fieldPath"].as_str();
                    assert_eq!(field, Some("metadata.name"), "{name}");
                    POD_NAME.to_string()
                }
            };
            (name, value)
        })
        .filter(|(name, _)| name.starts_with("TRACING_") || name.starts_with("OTEL_"))
        .collect();
    let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "TRACING_ENABLED",
            "TRACING_SERVICE_NAME",
            "TRACING_SERVICE_NAMESPACE",
            "TRACING_SERVICE_INSTANCE_ID",
            "TRACING_SAMPLING_RATE",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
    );
    vars
}

/// The binary run as `ratelimit` with `tracing` (and a config directory, Redis and ports as
/// Istio's manifest gives them); the export is batched every 100 ms instead of 5 s.
struct AsRatelimit {
    binary: Binary,
    client: RateLimitServiceClient<tonic::transport::Channel>,
    _redis: RedisServer,
    _scratch: TempConfig,
}

async fn start_as_ratelimit(tracing: Vec<(String, String)>) -> AsRatelimit {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let scratch = TempConfig::new("");
    let root = scratch.dir.join("data");
    let config_dir = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    std::fs::write(config_dir.join("config.yaml"), CONFIG).expect("config");
    let (http_port, grpc_port, debug_port) = (free_port(), free_port(), free_port());
    let mut env: Vec<(String, String)> = [
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("HOST", "127.0.0.1".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("PORT", http_port.to_string()),
        ("GRPC_PORT", grpc_port.to_string()),
        ("DEBUG_PORT", debug_port.to_string()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(tracing);
    let mut binary = Binary::as_ratelimit(&scratch.dir, env, grpc_port, http_port).await;
    binary.wait_ready().await;
    let addr: SocketAddr = format!("127.0.0.1:{grpc_port}").parse().expect("addr");
    let client = RateLimitServiceClient::new(channel(addr).await);
    AsRatelimit {
        binary,
        client,
        _redis: redis,
        _scratch: scratch,
    }
}

/// Replaces (or adds) `name` in `env`.
fn set(env: &mut Vec<(String, String)>, name: &str, value: String) {
    env.retain(|(k, _)| k != name);
    env.push((name.to_string(), value));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_tracing_environment_exports_over_otlp_http_as_its_service() {
    let (otlp, receiver) = start_http_receiver().await;
    let mut env = envoy_gateway_tracing_env();
    let endpoint = env
        .iter()
        .find(|(k, _)| k == "OTEL_EXPORTER_OTLP_ENDPOINT")
        .map(|(_, v)| v.clone())
        .expect("endpoint");
    // OTLP/HTTP's port: Envoy Gateway sets no TRACING_EXPORTER_PROTOCOL (http, the default).
    assert!(
        endpoint.starts_with("http://") && endpoint.ends_with(":4318"),
        "{endpoint}"
    );
    assert!(!env.iter().any(|(k, _)| k == "TRACING_EXPORTER_PROTOCOL"));
    set(
        &mut env,
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://{otlp}"),
    );
    let mut rl = start_as_ratelimit(env).await;

    // No caller decides: TRACING_SAMPLING_RATE=1.0 samples every request.
    for tenant in ["a", "b", "c"] {
        rl.client
            .should_rate_limit(req("traced", &[&[("tenant", tenant)]]))
            .await
            .expect("answer");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = receiver.spans_with_resource();
        let roots = spans
            .iter()
            .filter(|(_, s)| s.name == "ShouldRateLimit")
            .count();
        if roots >= 3 && spans.iter().any(|(_, s)| s.name.starts_with("redis")) {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "no traces arrived over OTLP/HTTP: {spans:?}; log: {}",
            rl.binary.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (resource, span) in &spans {
        let get = |k: &str| resource.get(k).map(String::as_str);
        assert_eq!(get("service.name"), Some("envoy-ratelimit"), "{span:?}");
        assert_eq!(get("service.namespace"), Some("envoy-gateway-system"));
        assert_eq!(get("service.instance.id"), Some(POD_NAME));
    }
    let posts = receiver
        .http_posts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    assert!(!posts.is_empty());
    assert!(
        posts.iter().all(|c| c == "application/x-protobuf"),
        "{posts:?}"
    );
    let log = rl.binary.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("does not implement") && l.contains("TRACING")),
        "TRACING_* named as not implemented: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_rate_zero_continues_only_callers_sampled_traces() {
    let (otlp, receiver) = start_receiver().await;
    let mut env = envoy_gateway_tracing_env();
    set(&mut env, "TRACING_EXPORTER_PROTOCOL", "grpc".into());
    set(&mut env, "TRACING_SAMPLING_RATE", "0".into());
    set(
        &mut env,
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://{otlp}"),
    );
    let mut rl = start_as_ratelimit(env).await;

    for i in 0..20 {
        rl.client
            .should_rate_limit(req("traced", &[&[("tenant", &format!("t{i}"))]]))
            .await
            .expect("answer");
    }
    // Parent-based, as envoyproxy/ratelimit's sampler: a caller's sampled trace goes on.
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let mut traced = tonic::Request::new(req("traced", &[&[("tenant", "sampled")]]));
    traced.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-b7ad6b7169203331-01")
            .parse()
            .expect("metadata"),
    );
    rl.client.should_rate_limit(traced).await.expect("answer");

    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let spans = receiver.spans_with_resource();
        if spans.iter().any(|(_, s)| s.name == "ShouldRateLimit") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the caller's sampled trace never arrived over OTLP/gRPC; log: {}",
            rl.binary.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Anything sampled before it would have been exported with or before it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let spans = receiver.spans_with_resource();
    for (resource, span) in &spans {
        assert_eq!(hex(&span.trace_id), trace_id, "sampled at rate 0: {span:?}");
        assert_eq!(
            resource.get("service.name").map(String::as_str),
            Some("envoy-ratelimit")
        );
    }
}

/// Every variable of Envoy Gateway's Deployment with tracing on is in docs/compatibility.md's
/// table.
#[test]
fn every_tracing_variable_envoy_gateway_sets_is_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/compatibility.md"
    ))
    .expect("docs/compatibility.md");
    let first_cells: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split(" | ").next())
        .collect();
    for (name, _) in envoy_gateway_tracing_env() {
        assert!(
            first_cells.iter().any(|c| c.contains(&format!("`{name}`"))),
            "{name} is not in docs/compatibility.md's table"
        );
    }
    // Not among the ignored ones any more.
    let ignored = doc
        .lines()
        .find(|l| l.contains("not implemented"))
        .unwrap_or_default();
    assert!(!ignored.contains("TRACING"), "{ignored}");
}
