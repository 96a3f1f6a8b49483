//! envoyproxy/ratelimit's OpenTelemetry variables (`TRACING_*`) as `--traces*` flags.
//!
//! As there, traces are exported only with `TRACING_ENABLED=true`, over OTLP/HTTP unless
//! `TRACING_EXPORTER_PROTOCOL=grpc`, as service `RateLimit` unless `TRACING_SERVICE_NAME`
//! says otherwise, with a random `service.instance.id` unless `TRACING_SERVICE_INSTANCE_ID`
//! is set, sampling `TRACING_SAMPLING_RATE` of the traces no caller decided for. The
//! endpoint is the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS`), which tollgate's OpenTelemetry SDK reads as Go's does.

use super::args::{Builder, Get, GetBool};

use crate::cli::compat::error::CompatError;

pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
) -> Result<(), CompatError> {
    // envconfig parses every variable, so a malformed rate stops envoyproxy/ratelimit
    // whether tracing is on or not.
    let rate = match get("TRACING_SAMPLING_RATE") {
        None => 1.0,
        Some(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|r| !r.is_nan())
            .ok_or(CompatError::SamplingRate(text))?,
    };
    if !flag_bool("TRACING_ENABLED")?.unwrap_or(false) {
        let endpoint = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .into_iter()
        .find(|v| get(v).is_some());
        if let Some(var) = endpoint {
            t.flag("traces", "off");
            t.notes.push(format!(
                "{var} is set but TRACING_ENABLED is not true: no traces, as envoyproxy/ratelimit"
            ));
        }
        return Ok(());
    }
    t.flag("traces", "on");
    let protocol = match get("TRACING_EXPORTER_PROTOCOL").as_deref() {
        None | Some("http") => "http",
        Some("grpc") => "grpc",
        Some(other) => return Err(CompatError::TracingProtocol(other.to_string())),
    };
    t.flag("traces-protocol", protocol);
    t.flag(
        "traces-service-name",
        &get("TRACING_SERVICE_NAME").unwrap_or_else(|| "RateLimit".into()),
    );
    if let Some(namespace) = get("TRACING_SERVICE_NAMESPACE") {
        t.flag("traces-service-namespace", &namespace);
    }
    let instance = get("TRACING_SERVICE_INSTANCE_ID").unwrap_or_else(random_uuid);
    t.flag("traces-service-instance-id", &instance);
    // Go's TraceIDRatioBased: at least 1 samples every trace, at most 0 none.
    t.flag("traces-sampling-rate", &rate.clamp(0.0, 1.0).to_string());
    Ok(())
}

/// A random (version 4) UUID, as envoyproxy/ratelimit names an instance without an id.
fn random_uuid() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No entropy source: still unique enough per process and moment.
        let seed = std::process::id() as u128
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
        b = seed.to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::super::translate as translate_env;
    use super::*;
    use std::collections::HashMap;

    fn run(vars: &[(&str, &str)]) -> Result<(Vec<String>, Vec<String>), CompatError> {
        let mut map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        map.insert("REDIS_URL".into(), "h:1".into());
        let t = translate_env("ratelimit".into(), &|k| map.get(k).cloned())?;
        let traces = t
            .args
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .filter(|a| a.starts_with("--traces"))
            .collect();
        Ok((traces, t.notes))
    }

    #[test]
    fn envoy_gateways_tracing_environment() {
        let (args, notes) = run(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-5b6c-x"),
            ("TRACING_SAMPLING_RATE", "0.6"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--traces=on",
                "--traces-protocol=http",
                "--traces-service-name=envoy-ratelimit",
                "--traces-service-namespace=envoy-gateway-system",
                "--traces-service-instance-id=envoy-ratelimit-5b6c-x",
                "--traces-sampling-rate=0.6",
            ]
        );
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn defaults_off_and_errors() {
        let (args, _) = run(&[("TRACING_ENABLED", "1")]).unwrap();
        assert_eq!(
            args[..3],
            [
                "--traces=on",
                "--traces-protocol=http",
                "--traces-service-name=RateLimit"
            ]
        );
        let id = args[3]
            .strip_prefix("--traces-service-instance-id=")
            .unwrap();
        assert_eq!((id.len(), &id[14..15], &id[8..9]), (36, "4", "-"), "{id}");
        assert_eq!(args[4], "--traces-sampling-rate=1");
        let (args, _) = run(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("TRACING_SAMPLING_RATE", "7"),
            ("TOLLGATE_TRACES_SERVICE_NAME", "mine"),
        ])
        .unwrap();
        assert!(args.contains(&"--traces-protocol=grpc".to_string()));
        assert!(args.contains(&"--traces-sampling-rate=1".to_string()));
        assert!(!args.iter().any(|a| a.starts_with("--traces-service-name")));
        // Off: nothing, unless an endpoint would turn tollgate's tracing on.
        assert_eq!(
            run(&[("TRACING_SERVICE_NAME", "x")]).unwrap().0,
            Vec::<String>::new()
        );
        let (args, notes) = run(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap();
        assert_eq!(args, ["--traces=off"]);
        assert!(
            notes.iter().any(|n| n.contains("TRACING_ENABLED")),
            "{notes:?}"
        );
        assert_eq!(
            run(&[
                ("TRACING_ENABLED", "true"),
                ("TRACING_EXPORTER_PROTOCOL", "zipkin")
            ]),
            Err(CompatError::TracingProtocol("zipkin".into()))
        );
        assert_eq!(
            run(&[("TRACING_SAMPLING_RATE", "half")]),
            Err(CompatError::SamplingRate("half".into()))
        );
        assert!(run(&[("TRACING_ENABLED", "on")]).is_err());
    }
}
