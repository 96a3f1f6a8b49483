//! envoyproxy/ratelimit's listener variables as flags: `HOST`/`PORT` (admin),
//! `GRPC_HOST`/`GRPC_PORT`, `DEBUG_HOST`/`DEBUG_PORT`, `USE_PROMETHEUS` with `PROMETHEUS_ADDR`,
//! the gRPC connection age and the gRPC server's TLS.

use super::args::{Builder, Get, GetBool};
use super::error::CompatError;

/// Translates the listeners; whether `USE_PROMETHEUS` is on (the statistics need it).
pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
) -> Result<bool, CompatError> {
    // Listeners. tollgate's default host is `::` (dual-stack, 0.0.0.0 without IPv6).
    let addr = |host: Option<String>, port: Option<String>, default_port: u16| {
        let host = host.unwrap_or_else(|| "::".into());
        let port = port.unwrap_or_else(|| default_port.to_string());
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    t.flag("http-addr", &addr(get("HOST"), get("PORT"), 8080));
    t.flag("grpc-addr", &addr(get("GRPC_HOST"), get("GRPC_PORT"), 8081));
    t.flag(
        "debug-addr",
        &addr(get("DEBUG_HOST"), get("DEBUG_PORT"), 6070),
    );
    let use_prometheus = flag_bool("USE_PROMETHEUS")?.unwrap_or(false);
    if use_prometheus {
        let prometheus = get("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let (host, port) = prometheus
            .rsplit_once(':')
            .ok_or_else(|| CompatError::PrometheusAddr(prometheus.clone()))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        t.flag(
            "metrics-addr",
            &addr(
                (!host.is_empty()).then(|| host.to_string()),
                Some(port.into()),
                9090,
            ),
        );
    }
    if let Some(age) = get("GRPC_MAX_CONNECTION_AGE") {
        t.flag("grpc-max-connection-age", &age);
    }
    if let Some(grace) = get("GRPC_MAX_CONNECTION_AGE_GRACE") {
        t.flag("grpc-max-connection-age-grace", &grace);
    }
    if flag_bool("GRPC_SERVER_USE_TLS")?.unwrap_or(false) {
        let need = |name: &'static str| get(name).ok_or(CompatError::TlsNeeds(name));
        t.flag("grpc-tls-cert", &need("GRPC_SERVER_TLS_CERT")?);
        t.flag("grpc-tls-key", &need("GRPC_SERVER_TLS_KEY")?);
        // envoyproxy/ratelimit verifies clients against GRPC_CLIENT_TLS_CACERT only; Envoy
        // Gateway sets GRPC_SERVER_TLS_CA_CERT (which envoyproxy/ratelimit never reads) to
        // the CA that signed its proxies' client certificate, which they always present:
        // tollgate verifies them against it.
        if let Some(ca) = get("GRPC_CLIENT_TLS_CACERT").or_else(|| get("GRPC_SERVER_TLS_CA_CERT")) {
            t.flag("grpc-client-ca", &ca);
        }
        if get("GRPC_CLIENT_TLS_SAN").is_some() {
            return Err(CompatError::ClientSan);
        }
    }
    Ok(use_prometheus)
}
