//! `CONFIG_TYPE=GRPC_XDS_SOTW`: envoyproxy/ratelimit's xDS variables as `--config-xds-*` flags.

use super::args::{Builder, Get, GetBool};

use crate::cli::compat::error::CompatError;

/// `CONFIG_TYPE=GRPC_XDS_SOTW`: the config from an xDS server (Envoy Gateway's deployment).
/// The RUNTIME_* variables are not read, as envoyproxy/ratelimit does not in this mode.
pub(super) fn translate(
    t: &mut Builder,
    get: &Get,
    flag_bool: &GetBool,
) -> Result<(), CompatError> {
    let server = get("CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| "localhost:18000".into());
    let tls = flag_bool("CONFIG_GRPC_XDS_SERVER_USE_TLS")?.unwrap_or(false);
    let scheme = if tls { "https" } else { "http" };
    t.flag("config-xds", &format!("{scheme}://{server}"));
    for (var, flag) in [
        ("CONFIG_GRPC_XDS_NODE_ID", "config-xds-node-id"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "config-xds-node-metadata"),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "config-xds-headers",
        ),
        (
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            "config-xds-backoff-initial",
        ),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "config-xds-backoff-max"),
        (
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "config-xds-backoff-random-factor",
        ),
    ] {
        if let Some(value) = get(var) {
            t.flag(flag, &value);
        }
    }
    if let Some(jitter) = flag_bool("XDS_CLIENT_BACKOFF_JITTER")? {
        t.flag("config-xds-backoff-jitter", &jitter.to_string());
    }
    if let Some(size) = get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
        let bytes: u64 = size
            .parse()
            .map_err(|_| CompatError::XdsMessageSize(size.clone()))?;
        // 0 is envoyproxy/ratelimit's "unset": gRPC's 4 MiB.
        if bytes > 0 {
            t.flag("config-xds-max-message-size", &bytes.to_string());
        }
    }
    for (var, flag) in [
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "config-xds-ca"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "config-xds-client-cert"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "config-xds-client-key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "config-xds-san"),
    ] {
        match get(var) {
            Some(value) if tls => t.flag(flag, &value),
            Some(_) => return Err(CompatError::XdsTlsOff(var)),
            None => {}
        }
    }
    t.switch(
        "config-xds-start-without-config",
        flag_bool("FORCE_START_WITHOUT_INITIAL_CONFIG")?,
    );
    // CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL spaces envoyproxy/ratelimit's dial
    // retries inside one connection attempt; tollgate's attempts are spaced by the backoff.
    Ok(())
}
