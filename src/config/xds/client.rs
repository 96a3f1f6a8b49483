//! The ADS stream: connect (TLS and mutual TLS as configured), ask for every rate limit
//! config resource, apply each response or refuse it, answer it (ACK or NACK), and reconnect
//! with backoff when the stream is lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures::channel::mpsc;
use futures::SinkExt;
use tokio::sync::oneshot;
use tonic::metadata::{AsciiMetadataValue, MetadataKey};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use super::super::reload::{ReloadError, ReloadStatus};
use super::super::Config;
use super::{XdsOptions, XdsState};
use crate::base::shutdown::Shutdown;
use crate::config::load::LoadOptions;
use crate::config::xds::resource::{compile_resources, TYPE_URL};
use crate::pb::ads::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::ads::{DiscoveryRequest, DiscoveryResponse};
use crate::pb::core::Node;
use crate::pb::google::rpc::Status;
use crate::telemetry::metrics::Metrics;

/// Why the xDS source cannot start, or why a stream was lost.
#[derive(Debug, thiserror::Error)]
pub enum XdsError {
    #[error("xDS server '{url}': {source}")]
    Url {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("xDS TLS file {}: {source}", .path.display())]
    TlsFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("xDS TLS options need an https:// server address (got '{0}')")]
    TlsWithoutHttps(String),
    #[error("xDS header '{0}': not a valid gRPC metadata name and ASCII value")]
    Header(String),
    #[error("cannot connect: {0}")]
    Connect(#[source] tonic::transport::Error),
    #[error("stream failed: {} {}{}", .0.code(), .0.message(), too_large_hint(.0))]
    Stream(#[source] tonic::Status),
    #[error("the server closed the stream")]
    Closed,
}

/// The xDS config source: runs beside the server and swaps `config` on every response.
pub struct XdsSource {
    pub opts: XdsOptions,
    pub load: LoadOptions,
    pub config: Arc<ArcSwap<Config>>,
    pub status: Arc<ReloadStatus>,
    pub state: Arc<XdsState>,
    pub metrics: Arc<Metrics>,
}

/// What one stream needs from the ones before it.
struct Progress {
    /// The version last applied: sent on every request (a new stream's first one too).
    acked: String,
    /// Fired once, when the first config is applied.
    first: Option<oneshot::Sender<()>>,
    /// Reconnect attempts since the last response.
    attempt: u32,
    last_nack: Option<Instant>,
}

/// What to change when a response was larger than the client accepts.
fn too_large_hint(status: &tonic::Status) -> &'static str {
    if status.code() == tonic::Code::OutOfRange
        && status
            .message()
            .contains("decoded message length too large")
    {
        " (a response larger than --config-xds-max-message-size)"
    } else {
        ""
    }
}

/// The fewest time between two NACKs: a control plane that answers a NACK by sending the
/// same response again (go-control-plane's snapshot cache does) is not spun on.
const NACK_SPACING: Duration = Duration::from_secs(1);

impl XdsSource {
    /// The control plane's endpoint, with every file and header checked, so a mistake stops
    /// the start instead of the first connection.
    pub fn endpoint(&self) -> Result<Endpoint, XdsError> {
        let o = &self.opts;
        let url = if o.server.contains("://") {
            o.server.clone()
        } else {
            format!("http://{}", o.server)
        };
        let bad_url = |source| XdsError::Url {
            url: url.clone(),
            source,
        };
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(bad_url)?
            .connect_timeout(Duration::from_secs(5))
            // A control plane gone silent (no RST: a partition, a frozen node) is noticed.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        let wants_tls = o.ca.is_some() || o.client_cert.is_some() || o.san.is_some();
        if url.starts_with("https://") {
            let read = |path: &std::path::PathBuf| {
                std::fs::read(path).map_err(|source| XdsError::TlsFile {
                    path: path.clone(),
                    source,
                })
            };
            let mut tls = ClientTlsConfig::new();
            tls = match &o.ca {
                Some(ca) => tls.ca_certificate(Certificate::from_pem(read(ca)?)),
                None => tls.with_native_roots(),
            };
            if let Some((cert, key)) = &o.client_cert {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            if let Some(san) = &o.san {
                tls = tls.domain_name(san.clone());
            }
            endpoint = endpoint.tls_config(tls).map_err(bad_url)?;
        } else if wants_tls {
            return Err(XdsError::TlsWithoutHttps(o.server.clone()));
        }
        for (k, v) in &o.headers {
            self.header(k, v)?;
        }
        Ok(endpoint)
    }

    fn header(
        &self,
        k: &str,
        v: &str,
    ) -> Result<(MetadataKey<tonic::metadata::Ascii>, AsciiMetadataValue), XdsError> {
        let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| XdsError::Header(k.to_string()))?;
        let value = v.parse().map_err(|_| XdsError::Header(k.to_string()))?;
        Ok((key, value))
    }

    /// Follows the control plane until shutdown. `first` fires once the first config is
    /// applied.
    pub async fn run(self, endpoint: Endpoint, first: oneshot::Sender<()>, shutdown: Shutdown) {
        let mut progress = Progress {
            acked: String::new(),
            first: Some(first),
            attempt: 0,
            last_nack: None,
        };
        loop {
            let lost = tokio::select! {
                e = self.stream(&endpoint, &mut progress) => e,
                _ = shutdown.wait() => return,
            };
            self.metrics.xds_connected.set(0);
            let delay = self.opts.backoff.delay(progress.attempt);
            progress.attempt = progress.attempt.saturating_add(1);
            tracing::warn!(
                server = %self.opts.server,
                error = %lost,
                retry_in = ?delay,
                "xDS config stream lost; the running config stays"
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.wait() => return,
            }
        }
    }

    /// One stream, until it fails.
    async fn stream(&self, endpoint: &Endpoint, progress: &mut Progress) -> XdsError {
        let channel = match endpoint.connect().await {
            Ok(c) => c,
            Err(e) => return XdsError::Connect(e),
        };
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.opts.max_message_size);
        let (mut requests, outgoing) = mpsc::channel::<DiscoveryRequest>(4);
        // The channel holds 4 and this is its first: it cannot be full.
        let _ = requests.try_send(self.request(&progress.acked, "", None));
        let mut call = tonic::Request::new(outgoing);
        for (k, v) in &self.opts.headers {
            if let Ok((key, value)) = self.header(k, v) {
                call.metadata_mut().insert(key, value);
            }
        }
        let mut responses = match client.stream_aggregated_resources(call).await {
            Ok(r) => r.into_inner(),
            Err(status) => return XdsError::Stream(status),
        };
        self.metrics.xds_connected.set(1);
        tracing::info!(server = %self.opts.server, node = %self.opts.node_id, "xDS config stream open");
        loop {
            let response = match responses.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return XdsError::Closed,
                Err(status) => return XdsError::Stream(status),
            };
            progress.attempt = 0;
            let answer = self.apply(response, progress).await;
            if requests.send(answer).await.is_err() {
                return XdsError::Closed;
            }
        }
    }

    /// Applies one response; the request that answers it (ACK or NACK).
    async fn apply(
        &self,
        response: DiscoveryResponse,
        progress: &mut Progress,
    ) -> DiscoveryRequest {
        let version = response.version_info;
        if response.type_url != TYPE_URL {
            // Not asked for (an ADS server may push other types): refused, nothing changes.
            let why = format!("tollgate reads {TYPE_URL} only, not {}", response.type_url);
            return self.refuse(why, &response.nonce, progress).await;
        }
        match compile_resources(&response.resources, &self.load) {
            Ok(config) => {
                let domains = config.domains.len();
                self.config.store(Arc::new(config));
                self.state.set_version(&version);
                self.metrics.xds_version(&version);
                self.status.record(Ok(()));
                tracing::info!(%version, domains, "xDS config applied");
                if domains == 0 {
                    tracing::warn!(
                        %version,
                        "the xDS config has no domain: every request is answered OK without a limit"
                    );
                }
                if let Some(first) = progress.first.take() {
                    let _ = first.send(());
                }
                progress.acked = version;
                self.request(&progress.acked, &response.nonce, None)
            }
            Err(e) => {
                self.status.record(Err(ReloadError::Xds(e.clone())));
                let why = format!("version {version}: {e}");
                self.refuse(why, &response.nonce, progress).await
            }
        }
    }

    async fn refuse(&self, why: String, nonce: &str, progress: &mut Progress) -> DiscoveryRequest {
        self.metrics.xds_nacks.inc();
        if let Some(wait) = progress
            .last_nack
            .and_then(|t| NACK_SPACING.checked_sub(t.elapsed()))
        {
            tokio::time::sleep(wait).await;
        }
        progress.last_nack = Some(Instant::now());
        let status = Status {
            // INVALID_ARGUMENT: the config, not the transport, is at fault.
            code: 3,
            message: why,
            details: Vec::new(),
        };
        self.request(&progress.acked, nonce, Some(status))
    }

    fn request(&self, version: &str, nonce: &str, error: Option<Status>) -> DiscoveryRequest {
        let fields = self
            .opts
            .node_metadata
            .iter()
            .map(|(k, v)| {
                let value = prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue(v.clone())),
                };
                (k.clone(), value)
            })
            .collect();
        DiscoveryRequest {
            version_info: version.to_string(),
            node: Some(Node {
                id: self.opts.node_id.clone(),
                cluster: String::new(),
                metadata: Some(prost_types::Struct { fields }),
                user_agent_name: "tollgate".into(),
                user_agent_version_type: Some(
                    crate::pb::core::node::UserAgentVersionType::UserAgentVersion(
                        crate::base::version::VERSION.into(),
                    ),
                ),
            }),
            resource_names: Vec::new(),
            type_url: TYPE_URL.into(),
            response_nonce: nonce.to_string(),
            error_detail: error,
        }
    }
}
