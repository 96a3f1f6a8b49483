//! Config over xDS, state of the world: the config source of Envoy Gateway's rate limit
//! deployment (`CONFIG_TYPE=GRPC_XDS_SOTW`, or `--config-xds`).
//!
//! One `AggregatedDiscoveryService/StreamAggregatedResources` stream asks for every
//! `RateLimitConfig` resource (one resource is one domain). Each response is the whole set:
//! it is compiled as files are ([`resource`]) and swapped in whole, then ACKed (its version and
//! nonce echoed); a response that does not compile is NACKed with `error_detail` naming the
//! resource and the fault, and the running config stays. A lost stream is reopened with
//! jittered exponential backoff ([`backoff`]); the running config stays meanwhile.
//!
//! The resource carries envoyproxy/ratelimit's keys only: tollgate's own (algorithms,
//! windows, `shared`, `hierarchical`, leases, domain settings) cannot travel over it. Usage
//! domains are chosen by name (`--usage-domains`), so they work for xDS-fed domains too.

pub mod backoff;
pub mod client;
pub mod resource;

use std::path::PathBuf;
use std::sync::Arc;

use backoff::Backoff;

/// Where the xDS control plane is and how to talk to it.
#[derive(Debug, Clone)]
pub struct XdsOptions {
    /// `http://host:port` or `https://host:port` (TLS).
    pub server: String,
    /// The node id sent on every request (Envoy Gateway's server answers `envoy-ratelimit`).
    pub node_id: String,
    /// The node's metadata, as string values.
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent with the stream.
    pub headers: Vec<(String, String)>,
    /// Largest response accepted, in bytes.
    pub max_message_size: usize,
    pub backoff: Backoff,
    /// For `https://`: the server's CA (else the system's roots), a client certificate and
    /// key for mutual TLS, and the name the server's certificate must carry (else the host).
    pub ca: Option<PathBuf>,
    pub client_cert: Option<(PathBuf, PathBuf)>,
    pub san: Option<String>,
    /// Serve before the first config arrives (unknown domains answer OK meanwhile); without
    /// it nothing listens until a config has compiled.
    pub start_without_config: bool,
}

impl XdsOptions {
    /// Options for `server` with envoyproxy/ratelimit's defaults.
    pub fn new(server: impl Into<String>) -> XdsOptions {
        XdsOptions {
            server: server.into(),
            node_id: "default".into(),
            node_metadata: Vec::new(),
            headers: Vec::new(),
            max_message_size: 4 << 20,
            backoff: Backoff::default(),
            ca: None,
            client_cert: None,
            san: None,
            start_without_config: false,
        }
    }
}

/// What the xDS source last applied, for `/rlconfig`.
#[derive(Debug, Default)]
pub struct XdsState {
    version: parking_lot::Mutex<Option<String>>,
}

impl XdsState {
    pub fn new() -> Arc<XdsState> {
        Arc::new(XdsState::default())
    }

    /// The running config's `version_info`; `None` before the first.
    pub fn version(&self) -> Option<String> {
        self.version.lock().clone()
    }

    fn set_version(&self, v: &str) {
        *self.version.lock() = Some(v.to_string());
    }
}
