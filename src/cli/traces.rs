//! `serve`'s trace flags: OpenTelemetry traces over OTLP.

use clap::Args;

use crate::telemetry::logging::{OtlpProtocol, TraceExport, TraceOptions};

/// OpenTelemetry traces over OTLP; the endpoint is the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Export traces: `auto` (when an OTLP endpoint variable is set), `on`, `off`.
    #[arg(long, env = "TOLLGATE_TRACES", value_enum, default_value = "auto")]
    pub traces: TraceExport,
    /// OTLP transport: `grpc`, or `http` (protobuf bodies to `<endpoint>/v1/traces`). Default:
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`'s (`grpc` or `http/protobuf`), else `grpc`.
    #[arg(long, env = "TOLLGATE_TRACES_PROTOCOL", value_enum)]
    pub traces_protocol: Option<OtlpProtocol>,
    /// The `service.name` of exported spans (default: `OTEL_SERVICE_NAME`, else `tollgate`).
    #[arg(long, env = "TOLLGATE_TRACES_SERVICE_NAME")]
    pub traces_service_name: Option<String>,
    /// Their `service.namespace`.
    #[arg(long, env = "TOLLGATE_TRACES_SERVICE_NAMESPACE")]
    pub traces_service_namespace: Option<String>,
    /// Their `service.instance.id` (Envoy Gateway: the pod's name).
    #[arg(long, env = "TOLLGATE_TRACES_SERVICE_INSTANCE_ID")]
    pub traces_service_instance_id: Option<String>,
    /// Share of traces sampled, 0 to 1, when the caller sent no sampling decision (a caller's
    /// decision is followed). Default: `OTEL_TRACES_SAMPLER`'s, else every trace.
    #[arg(long, env = "TOLLGATE_TRACES_SAMPLING_RATE", value_parser = parse_ratio)]
    pub traces_sampling_rate: Option<f64>,
}

impl TraceArgs {
    pub fn options(&self) -> TraceOptions {
        TraceOptions {
            export: self.traces,
            protocol: self.traces_protocol,
            service_name: self.traces_service_name.clone(),
            service_namespace: self.traces_service_namespace.clone(),
            service_instance_id: self.traces_service_instance_id.clone(),
            sampling_rate: self.traces_sampling_rate,
        }
    }
}

/// A sampling rate that is not a number from 0 to 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{given}' is not a number from 0 to 1")]
pub struct RatioError {
    given: String,
}

fn parse_ratio(text: &str) -> Result<f64, RatioError> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| RatioError {
            given: text.to_string(),
        })
}
