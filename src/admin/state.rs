//! What the admin handlers share: the limiter, the running config and its reload status,
//! readiness, the xDS state and the token; and readiness with its reason, said once for
//! `/readyz` and the status page.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::admin::token::AdminToken;
use crate::config::reload::ReloadStatus;
use crate::config::xds::XdsState;
use crate::config::Config;
use crate::service::RateLimiter;
use crate::store::Store;

pub struct AdminState<S> {
    pub limiter: Arc<RateLimiter<S>>,
    pub config: Arc<ArcSwap<Config>>,
    pub reload_status: Arc<ReloadStatus>,
    /// Readiness as the health task last saw it.
    pub ready: Arc<AtomicBool>,
    /// Readiness also needs a config with at least one domain.
    pub ready_needs_config: bool,
    /// The xDS server and what it last sent, when the config comes over xDS.
    pub xds: Option<(String, Arc<XdsState>)>,
    /// `/metrics` is also served here (envoyproxy/ratelimit's `PROMETHEUS_PATH`).
    pub metrics_path: String,
    /// `--admin-token-file`: required by the write listener and, when set, by the endpoints
    /// that reveal tenants and usage.
    pub token: Option<Arc<AdminToken>>,
    /// Where the config comes from, as the status page names it.
    pub config_source: String,
}

/// Whether the instance serves, and why not.
pub enum Readiness {
    /// `warning`: a ready store with a risk.
    Ready {
        warning: Option<String>,
    },
    NotReady(String),
}

impl<S: Store> AdminState<S> {
    /// Readiness as the health task last saw it, with the store's reason when not ready.
    pub fn readiness(&self) -> Readiness {
        let store = self.limiter.store();
        if self.ready.load(Ordering::Relaxed) {
            return Readiness::Ready {
                warning: store.warning(),
            };
        }
        Readiness::NotReady(match store.reason() {
            Some(r) => r.to_string(),
            None if self.ready_needs_config && self.config.load().domains.is_empty() => {
                "no config with a domain loaded yet (--ready-needs-config)".to_string()
            }
            None => "shutting down".to_string(),
        })
    }
}
