//! The rate limit service: one `ShouldRateLimit` call, top to bottom.
//!
//! [`validate`] the request → [`plan`] it against the current config → let the [`Store`]
//! decide its charges atomically → [`assemble`] the decision → map it to Envoy's response
//! ([`respond`]). No algorithm logic here. The gRPC service and the HTTP `/json` endpoint both
//! call [`RateLimiter::should_rate_limit`].
//!
//! [`validate`]: crate::validate::validate
//! [`plan`]: crate::plan::plan
//! [`assemble`]: crate::decision::assemble
//! [`respond`]: crate::respond

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::Config;
use crate::decision::{self, assemble, Code, Decision};
use crate::metrics::{inc, Metrics};
use crate::pb::rls::rate_limit_service_server::RateLimitService;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};
use crate::plan::{plan, Plan};
use crate::respond::response;
use crate::settings::{FailureMode, Settings};
use crate::store::{ApplyMode, Store};
use crate::validate::validate;

/// The gRPC face of a [`RateLimiter`].
pub struct GrpcService<S>(pub Arc<RateLimiter<S>>);

#[tonic::async_trait]
impl<S: Store> RateLimitService for GrpcService<S> {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let req = request.into_inner();
        let resp = self.0.should_rate_limit(&req).await?;
        Ok(tonic::Response::new(resp))
    }
}

/// Why a call failed, mapped to a gRPC status or an HTTP code by the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    Unavailable(String),
}

impl From<CallError> for tonic::Status {
    fn from(e: CallError) -> tonic::Status {
        match e {
            CallError::InvalidArgument(m) => tonic::Status::invalid_argument(m),
            CallError::Unavailable(m) => tonic::Status::unavailable(m),
        }
    }
}

pub struct RateLimiter<S> {
    config: Arc<ArcSwap<Config>>,
    store: Arc<S>,
    settings: Settings,
    metrics: Arc<Metrics>,
}

impl<S: Store> RateLimiter<S> {
    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, CallError> {
        let invalid = |m: String| {
            inc(&self.metrics.invalid);
            CallError::InvalidArgument(m)
        };
        validate(req, &self.settings.bounds).map_err(invalid)?;
        let config = self.config.load_full();
        let plan = plan(&config, req).map_err(|e| invalid(e.0))?;
        let mode = ApplyMode {
            count_rejected: self.settings.count_rejected,
        };
        let outcomes = if plan.charges.is_empty() {
            Vec::new()
        } else {
            match self.store.apply(&plan, mode).await {
                Ok(o) => o,
                Err(e) => return self.on_store_failure(req, &plan, e.0),
            }
        };
        let decision = assemble(&plan, &outcomes, self.settings.global_shadow);
        self.observe(req, &decision);
        Ok(response(&self.settings, req, &plan, &decision, None))
    }

    /// The failure policy answers for a store that could not decide.
    fn on_store_failure(
        &self,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        error: String,
    ) -> Result<RateLimitResponse, CallError> {
        let policy = self.settings.failure_mode;
        tracing::warn!(%error, policy = policy.name(), "store failed");
        let m = &self.metrics;
        let allow = match policy {
            FailureMode::Error => {
                inc(&m.store_failure_error);
                return Err(CallError::Unavailable(format!(
                    "rate limit store unavailable: {error}"
                )));
            }
            FailureMode::Allow => {
                inc(&m.store_failure_allow);
                true
            }
            FailureMode::Deny => {
                inc(&m.store_failure_deny);
                false
            }
        };
        let decision = decision::on_store_failure(plan, allow, self.settings.global_shadow);
        self.observe(req, &decision);
        Ok(response(&self.settings, req, plan, &decision, Some(policy)))
    }

    /// Counts the answer (and logs costs no limit can ever grant).
    fn observe(&self, req: &RateLimitRequest, decision: &Decision<'_>) {
        let m = &self.metrics;
        inc(match decision.overall {
            Code::Ok => &m.ok,
            Code::OverLimit => &m.over_limit,
        });
        if decision.shadowed {
            inc(&m.shadow_over);
        }
        for (i, s) in decision.statuses.iter().enumerate() {
            if s.unsatisfiable {
                inc(&m.unsatisfiable);
                tracing::info!(
                    domain = %req.domain,
                    descriptor = i,
                    limit = s.limit.map_or("", |l| l.name.as_str()),
                    "cost exceeds what the limit can ever grant"
                );
            }
        }
    }

    pub fn new(config: Arc<ArcSwap<Config>>, store: Arc<S>, settings: Settings) -> Self {
        RateLimiter {
            config,
            store,
            settings,
            metrics: Arc::default(),
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn store(&self) -> &Arc<S> {
        &self.store
    }
}
