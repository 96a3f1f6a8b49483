//! Logs and traces.
//!
//! Logs go to stderr as text or JSON lines, through one `tracing` filter. Traces are
//! OpenTelemetry spans exported over OTLP/gRPC, and only when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; the SDK reads
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_TRACES_SAMPLER` / `_ARG` itself.
//! Unset, no span is ever created, so tracing costs nothing.
//!
//! A `ShouldRateLimit` span continues the caller's trace from its W3C `traceparent` (Envoy
//! sends it when tracing is on); Redis round trips and refunds are its children. Spans
//! carry the domain, counts and outcomes, never descriptor values.

use std::sync::OnceLock;

use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
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
}

/// Starts logging with `filter` (tracing-subscriber syntax; an invalid one is an error).
pub fn init_logs(filter: &str, format: LogFormat) -> Result<(), TelemetryError> {
    let filter = EnvFilter::try_new(filter).map_err(|source| TelemetryError::LogFilter {
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

/// The trace pipeline; flushes what is left when dropped.
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

static ENABLED: OnceLock<bool> = OnceLock::new();

/// Whether spans are exported (an OTLP endpoint is configured).
pub fn enabled() -> bool {
    ENABLED.get().copied().unwrap_or(false)
}

/// Starts exporting traces when an OTLP endpoint is configured. Must run inside the Tokio
/// runtime (the gRPC exporter's connection lives there).
pub fn init_traces() -> Result<Traces, TelemetryError> {
    let configured = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    if !configured {
        let _ = ENABLED.set(false);
        return Ok(Traces { provider: None });
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(TelemetryError::Exporter)?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("tollgate");
    }
    let provider = SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter)
        .build();
    global::set_tracer_provider(provider.clone());
    let _ = ENABLED.set(true);
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
pub fn child(name: &'static str, attributes: Vec<KeyValue>) -> Option<Context> {
    if !enabled() {
        return None;
    }
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
