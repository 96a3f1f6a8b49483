//! Logs and traces.
//!
//! Logs go to stderr as text or JSON lines, through one `tracing` filter. Traces are
//! OpenTelemetry spans exported over OTLP (gRPC, or HTTP with protobuf bodies), by default only
//! when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//! set (`--traces` turns them on or off regardless). The SDK reads those endpoints,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` and
//! `OTEL_TRACES_SAMPLER` / `_ARG` itself; the `--traces-*` flags (envoyproxy/ratelimit's
//! `TRACING_*` variables) override the service's resource and the sampler. Off, no span is
//! ever created, so tracing costs nothing.
//!
//! A `ShouldRateLimit` span continues the caller's trace from its W3C `traceparent` (Envoy
//! sends it when tracing is on); Redis round trips and refunds are its children. Spans
//! carry the domain, counts and outcomes, never descriptor values.

use std::sync::OnceLock;

use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Logs or traces that cannot be started.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter '{filter}': {source}")]
    LogFilter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("cannot start logging: {0}")]
    Logging(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot start the OTLP trace exporter: {0}")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    #[error("{var}={value}: tollgate exports traces over OTLP `grpc` or `http/protobuf`")]
    Protocol { var: &'static str, value: String },
}

/// Whether traces are exported (`--traces`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TraceExport {
    /// When `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set.
    #[default]
    Auto,
    /// Always (to the SDK's default endpoint, localhost, when none is set).
    On,
    Off,
}

/// The OTLP transport (`--traces-protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (default port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies, `POST <endpoint>/v1/traces` (default port 4318).
    #[value(alias = "http/protobuf")]
    Http,
}

/// How traces are exported; `None` leaves a setting to the OpenTelemetry variables.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceOptions {
    pub export: TraceExport,
    /// `None`: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`, else gRPC.
    pub protocol: Option<OtlpProtocol>,
    /// `service.name` (else `OTEL_SERVICE_NAME`, else `tollgate`).
    pub service_name: Option<String>,
    /// `service.namespace`.
    pub service_namespace: Option<String>,
    /// `service.instance.id`.
    pub service_instance_id: Option<String>,
    /// Sample this share of traces no caller decided for (parent-based: a caller's sampled
    /// trace is always continued, an unsampled one never).
    pub sampling_rate: Option<f64>,
}

impl TraceOptions {
    fn protocol(&self) -> Result<OtlpProtocol, TelemetryError> {
        if let Some(p) = self.protocol {
            return Ok(p);
        }
        for var in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            match std::env::var(var).ok().filter(|v| !v.is_empty()).as_deref() {
                None => continue,
                Some("grpc") => return Ok(OtlpProtocol::Grpc),
                Some("http/protobuf") => return Ok(OtlpProtocol::Http),
                Some(other) => {
                    return Err(TelemetryError::Protocol {
                        var,
                        value: other.to_string(),
                    })
                }
            }
        }
        Ok(OtlpProtocol::Grpc)
    }
}

/// Starts logging with `filter` (tracing-subscriber syntax; an invalid one is an error).
pub fn init_logs(filter: &str, format: LogFormat) -> Result<(), TelemetryError> {
    let filter =
        EnvFilter::try_new(quiet_fred(filter)).map_err(|source| TelemetryError::LogFilter {
            filter: filter.to_string(),
            source,
        })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(TelemetryError::Logging)
}

/// `filter`, with fred's own lines kept below WARN unless it names fred: fred logs a lost
/// connection at WARN once per connection (several lines per event, one client per serving
/// thread), while the Redis store logs each event once, naming the node and the cause.
fn quiet_fred(filter: &str) -> String {
    let names_fred = filter.split(',').any(|d| d.trim().starts_with("fred"));
    match filter.trim() {
        _ if names_fred => filter.to_string(),
        "" => "fred=error".into(),
        f => format!("{f},fred=error"),
    }
}

/// The trace pipeline; flushes what is left when dropped.
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

static ENABLED: OnceLock<bool> = OnceLock::new();

/// Whether spans are exported (an OTLP endpoint is configured).
pub fn enabled() -> bool {
    ENABLED.get().copied().unwrap_or(false)
}

/// Starts exporting traces as `options` say. Must run inside the Tokio runtime (the gRPC
/// exporter's connection lives there).
pub fn init_traces(options: &TraceOptions) -> Result<Traces, TelemetryError> {
    let on = match options.export {
        TraceExport::On => true,
        TraceExport::Off => false,
        TraceExport::Auto => [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty())),
    };
    if !on {
        let _ = ENABLED.set(false);
        return Ok(Traces { provider: None });
    }
    let protocol = options.protocol()?;
    let exporter = match protocol {
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build(),
        // A blocking client: the SDK exports from a thread of its own, outside the runtime.
        OtlpProtocol::Http => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build(),
    }
    .map_err(TelemetryError::Exporter)?;
    let mut resource = Resource::builder();
    match &options.service_name {
        Some(name) => resource = resource.with_service_name(name.clone()),
        None if std::env::var_os("OTEL_SERVICE_NAME").is_none() => {
            resource = resource.with_service_name("tollgate");
        }
        None => {}
    }
    for (key, value) in [
        ("service.namespace", &options.service_namespace),
        ("service.instance.id", &options.service_instance_id),
    ] {
        if let Some(value) = value {
            resource = resource.with_attribute(KeyValue::new(key, value.clone()));
        }
    }
    let mut provider = SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter);
    if let Some(rate) = options.sampling_rate {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(rate),
        )));
    }
    let provider = provider.build();
    global::set_tracer_provider(provider.clone());
    let _ = ENABLED.set(true);
    tracing::info!(
        protocol = ?protocol,
        service_name = options.service_name.as_deref(),
        service_namespace = options.service_namespace.as_deref(),
        service_instance_id = options.service_instance_id.as_deref(),
        sampling_rate = options.sampling_rate,
        "exporting traces over OTLP"
    );
    Ok(Traces {
        provider: Some(provider),
    })
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

fn tracer() -> &'static BoxedTracer {
    static TRACER: OnceLock<BoxedTracer> = OnceLock::new();
    TRACER.get_or_init(|| global::tracer("tollgate"))
}

/// The call's HTTP/2 headers (gRPC metadata) as a propagation carrier.
struct Metadata<'a>(&'a http::HeaderMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        // Binary metadata (`-bin`) carries no trace context.
        self.0
            .keys()
            .map(|k| k.as_str())
            .filter(|k| !k.ends_with("-bin"))
            .collect()
    }
}

/// The context of a `ShouldRateLimit` server span continuing the caller's trace, or `None`
/// when tracing is off.
pub fn request_span(metadata: &http::HeaderMap) -> Option<Context> {
    if !enabled() {
        return None;
    }
    let parent = TraceContextPropagator::new().extract(&Metadata(metadata));
    let span = tracer()
        .span_builder("ShouldRateLimit")
        .with_kind(SpanKind::Server)
        .start_with_context(tracer(), &parent);
    Some(parent.with_span(span))
}

/// Adds attributes to the current span (a no-op without one).
pub fn annotate(attributes: impl FnOnce() -> Vec<KeyValue>) {
    if enabled() {
        let cx = Context::current();
        let span = cx.span();
        if span.is_recording() {
            span.set_attributes(attributes());
        }
    }
}

/// A child span of the current one (`None` when tracing is off), ended by the caller.
pub fn child(name: &'static str, attributes: impl FnOnce() -> Vec<KeyValue>) -> Option<Context> {
    if !enabled() {
        return None;
    }
    let attributes = attributes();
    let parent = Context::current();
    let span = tracer()
        .span_builder(name)
        .with_kind(SpanKind::Client)
        .with_attributes(attributes)
        .start_with_context(tracer(), &parent);
    Some(parent.with_span(span))
}

/// Ends the span of `cx` after adding `attributes`.
pub fn end(cx: Option<Context>, attributes: impl FnOnce() -> Vec<KeyValue>) {
    if let Some(cx) = cx {
        let span = cx.span();
        if span.is_recording() {
            span.set_attributes(attributes());
        }
        span.end();
    }
}
