//! Traces from outside: the binary, started with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an
//! OTLP receiver in this test (a tonic server built from `opentelemetry-proto`), continues the
//! caller's trace from its `traceparent` metadata, with a child span per Redis round trip, and
//! never puts a descriptor value in a span.

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
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;

use crate::support::binary::{Binary, Start, BIN};
use crate::support::redis::RedisServer;
use crate::support::server::{channel, free_port, req, TempConfig};

#[derive(Default, Clone)]
struct Receiver {
    requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.into_inner());
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
