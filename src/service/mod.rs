//! The rate limit service: one `ShouldRateLimit` call, top to bottom.
//!
//! [`validate`] the request → [`plan`] it against the current config → let the [`Store`]
//! decide its charges atomically → [`assemble`] the decision → map it to Envoy's response
//! ([`respond`]). No algorithm logic here. The gRPC listener ([`crate::serve::grpc`]) and the HTTP
//! `/json` endpoint both call [`RateLimiter::should_rate_limit`].
//!
//! [`validate`]: crate::service::validate::validate
//! [`plan`]: crate::plan::plan
//! [`assemble`]: crate::service::decision::assemble
//! [`respond`]: crate::service::respond

pub mod decision;
pub mod respond;
pub mod settings;
pub mod slots;
pub mod validate;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use opentelemetry::KeyValue;
use tokio::sync::Semaphore;

use crate::algorithm::concurrency::SlotId;
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::algorithm::rule::Role;
use crate::base::log_throttle;
use crate::config::{Config, DomainPolicy};
use crate::limit::Algorithm;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};
use crate::plan::{plan, Plan, PlannedCharge};
use crate::service::decision::{assemble, Code, Decision};
use crate::service::respond::response;
use crate::service::settings::{FailureMode, Settings};
use crate::service::validate::{validate, Bounds};
use crate::store::error::Cause;
use crate::store::error::StoreError;
use crate::store::memory::MemoryStore;
use crate::store::Store;
use crate::telemetry::logging;
use crate::telemetry::metrics::{DomainMetrics, LimitResult, Metrics, RequestCode, UNKNOWN_DOMAIN};
use crate::telemetry::stats::name;
use crate::telemetry::stats::registry::Statistics;
use crate::telemetry::stats::registry::{Observation, ServiceEvent};

/// Distinct unknown domain names logged per minute at most.
const UNKNOWN_NAMES_PER_MINUTE: usize = 10;

/// Why a call failed, mapped to a gRPC status or an HTTP code by the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Overloaded(String),
    #[error("{0}")]
    DeadlineExceeded(String),
}

impl From<CallError> for tonic::Status {
    fn from(e: CallError) -> tonic::Status {
        match e {
            CallError::InvalidArgument(m) => tonic::Status::invalid_argument(m),
            CallError::Unavailable(m) => tonic::Status::unavailable(m),
            CallError::Overloaded(m) => tonic::Status::resource_exhausted(m),
            CallError::DeadlineExceeded(m) => tonic::Status::deadline_exceeded(m),
        }
    }
}

pub struct RateLimiter<S> {
    config: Arc<ArcSwap<Config>>,
    store: Arc<S>,
    settings: Settings,
    metrics: Arc<Metrics>,
    /// The in-process limiter of `--failure-mode local`.
    fallback: Option<MemoryStore>,
    /// Permits for decisions in flight (`--max-in-flight`).
    in_flight: Semaphore,
    /// How long the store took to decide, over the last minute (the status page).
    store_latency: crate::telemetry::latency::LatencyWindow,
    /// The descriptors most often answered OVER_LIMIT, per domain (`GET /top`).
    top: crate::telemetry::top::Top,
}

/// What a release or a renew did: on how many concurrency limits the id held slots, and the
/// shortest lease among them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotsDone {
    pub limits: u32,
    pub lease_us: Option<u64>,
}

/// `plan` with every limit shared out among `share` replicas: `max(1, limit / share)` (and
/// the same for a token bucket's burst), as the response reports it. A limit of 0 (deny
/// everything) stays 0.
fn shared_out<'c>(plan: &Plan<'c>, share: u32) -> Plan<'c> {
    let charges = plan
        .charges
        .iter()
        .map(|c| {
            let mut limit = c.limit.as_ref().clone();
            let part = |n: u64| match n {
                0 => 0,
                n => (n / u64::from(share)).max(1),
            };
            limit.params.limit = part(limit.params.limit);
            limit.params.burst = part(limit.params.burst);
            limit.requests_per_unit = part(u64::from(limit.requests_per_unit)) as u32;
            PlannedCharge {
                limit: Cow::Owned(limit),
                key: c.key.clone(),
                ..c.clone()
            }
        })
        .collect();
    Plan {
        descriptors: plan.descriptors.clone(),
        charges,
        quota_descriptors: plan.quota_descriptors,
        slot: plan.slot,
    }
}

impl<S: Store> RateLimiter<S> {
    /// What one request may carry.
    pub fn bounds(&self) -> &Bounds {
        &self.settings.bounds
    }

    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, CallError> {
        let started = Instant::now();
        let config = self.config.load_full();
        // One lookup: the domain's policy, and whether it is configured at all.
        let policy = config.domains.get(&req.domain).map(|d| d.policy);
        let known = policy.is_some();
        if !known {
            // No limit applies to a domain nobody configured: say so, or a typo in Envoy's
            // `domain` is a silent fail-open. Names come from callers, so at most
            // `UNKNOWN_NAMES_PER_MINUTE` distinct ones are written per minute.
            if let Some(suppressed) =
                log_throttle::due_named("unknown_domain", &req.domain, UNKNOWN_NAMES_PER_MINUTE)
            {
                tracing::warn!(
                    domain = %log_throttle::printable(&req.domain),
                    suppressed,
                    "request for a domain that is not configured: answered OK without a limit"
                );
            }
        }
        let domain = self
            .metrics
            .domain(if known { &req.domain } else { UNKNOWN_DOMAIN });
        // A flood is refused at once rather than queued: latency stays bounded for the calls
        // that are answered, and the caller's failure policy decides for the rest.
        let Ok(_permit) = self.in_flight.try_acquire() else {
            self.metrics.request(&domain, RequestCode::Overloaded);
            return Err(CallError::Overloaded(format!(
                "{} decisions are already in flight (--max-in-flight)",
                self.settings.max_in_flight
            )));
        };
        if let Some(stats) = self.statistics().filter(|_| !known) {
            stats.domain_not_found(&req.domain, req.descriptors.len() as u64);
        }
        let result = self.decide(req, &config, policy, &domain).await;
        let elapsed = started.elapsed().as_secs_f64();
        self.metrics.decision_duration.observe(elapsed);
        if let Some(stats) = self.statistics() {
            stats.call(elapsed * 1000.0);
        }
        result
    }

    async fn decide(
        &self,
        req: &RateLimitRequest,
        config: &Config,
        policy: Option<DomainPolicy>,
        domain: &DomainMetrics,
    ) -> Result<RateLimitResponse, CallError> {
        let invalid = |m: String| {
            self.metrics.request(domain, RequestCode::Invalid);
            if let Some(stats) = self.statistics() {
                stats.service(ServiceEvent::ServiceError);
            }
            CallError::InvalidArgument(m)
        };
        validate(req, &self.settings.bounds).map_err(|e| invalid(e.to_string()))?;
        if let Some((id, at)) =
            crate::service::slots::release_of(req).map_err(|e| invalid(e.to_string()))?
        {
            return self
                .decide_with_release(req, config, policy, domain, id, &at)
                .await;
        }
        self.decide_valid(req, config, policy, domain).await
    }

    /// A request holding release descriptors (see [`crate::service::slots`]): the release, then the
    /// rest of it decided as usual; a release descriptor is answered OK, with no limit.
    async fn decide_with_release(
        &self,
        req: &RateLimitRequest,
        config: &Config,
        policy: Option<DomainPolicy>,
        domain: &DomainMetrics,
        id: SlotId,
        at: &[usize],
    ) -> Result<RateLimitResponse, CallError> {
        let (released, rest) = crate::service::slots::split_release(req, at);
        let release = RateLimitRequest {
            domain: req.domain.clone(),
            descriptors: released,
            hits_addend: 0,
        };
        if !(self.settings.disabled || policy.is_some_and(|p| p.disabled)) {
            if let Err(e) = self.slots(&release, id, Mode::Release).await {
                // The slots stay held until their lease ends.
                if let Some(suppressed) = log_throttle::due("release_failed") {
                    tracing::warn!(error = %e, suppressed, "a slot release failed: its slots are held until their lease ends");
                }
            }
        }
        let mut out = if rest.descriptors.is_empty() {
            self.metrics.request(domain, RequestCode::Ok);
            let plan = Plan::no_limits(0);
            let decision = assemble(&plan, &[], false);
            response(&self.settings, &rest, &plan, &decision, None)
        } else {
            self.decide_valid(&rest, config, policy, domain).await?
        };
        for &i in at {
            let ok = crate::pb::rls::rate_limit_response::DescriptorStatus {
                code: crate::pb::rls::rate_limit_response::Code::Ok as i32,
                ..Default::default()
            };
            out.statuses.insert(i.min(out.statuses.len()), ok);
        }
        Ok(out)
    }

    /// Releases or renews (`mode`) the slots `id` holds on the concurrency limits `req`'s
    /// descriptors reach; nothing else is charged or touched.
    pub async fn slots(
        &self,
        req: &RateLimitRequest,
        id: SlotId,
        mode: Mode,
    ) -> Result<SlotsDone, CallError> {
        validate(req, &self.settings.bounds)
            .map_err(|e| CallError::InvalidArgument(e.to_string()))?;
        let config = self.config.load();
        let mut plan = plan(&config, req).map_err(|e| CallError::InvalidArgument(e.0))?;
        plan.charges
            .retain(|c| c.limit.params.algorithm == Algorithm::Concurrency);
        for c in &mut plan.charges {
            c.role = Role::Enforced;
            c.cost = 1;
        }
        plan.quota_descriptors = 0;
        plan.slot = id;
        if plan.charges.is_empty() {
            return Ok(SlotsDone::default());
        }
        let outcomes =
            self.store.apply(&plan, mode).await.map_err(|e| {
                CallError::Unavailable(format!("rate limit store unavailable: {e}"))
            })?;
        let mut done = SlotsDone::default();
        for (c, o) in plan.charges.iter().zip(&outcomes) {
            if o.allowed {
                done.limits += 1;
                let lease = c.limit.params.window_us;
                done.lease_us = Some(done.lease_us.map_or(lease, |l: u64| l.min(lease)));
            }
        }
        self.metrics.slots(mode.name(), done.limits);
        Ok(done)
    }

    async fn decide_valid(
        &self,
        req: &RateLimitRequest,
        config: &Config,
        policy: Option<DomainPolicy>,
        domain: &DomainMetrics,
    ) -> Result<RateLimitResponse, CallError> {
        let invalid = |m: String| {
            self.metrics.request(domain, RequestCode::Invalid);
            if let Some(stats) = self.statistics() {
                stats.service(ServiceEvent::ServiceError);
            }
            CallError::InvalidArgument(m)
        };
        if self.settings.disabled || policy.is_some_and(|p| p.disabled) {
            // The kill switch: OK for every descriptor, nothing read or written.
            self.metrics.request(domain, RequestCode::Disabled);
            let plan = Plan::no_limits(req.descriptors.len());
            let decision = assemble(&plan, &[], false);
            return Ok(response(&self.settings, req, &plan, &decision, None));
        }
        if policy.is_some_and(|p| !p.allow_overrides)
            && req.descriptors.iter().any(|d| d.limit.is_some())
        {
            if let Some(suppressed) = log_throttle::due("override_ignored") {
                tracing::info!(
                    domain = %req.domain,
                    suppressed,
                    "limit override ignored: the domain has allow_overrides: false"
                );
            }
        }
        let mut plan = plan(config, req).map_err(|e| invalid(e.0))?;
        if plan
            .charges
            .iter()
            .any(|c| c.limit.params.algorithm == Algorithm::Concurrency)
        {
            plan.slot = crate::service::slots::new_id();
        }
        let mode = Mode::charging(self.settings.count_rejected);
        let outcomes = if plan.charges.is_empty() {
            Vec::new()
        } else if self.fallback.is_some() && !self.store.is_ready() {
            // The local fallback answers at once while the store is known to be down.
            let reason = self.store.reason().unwrap_or_else(|| {
                StoreError::new(self.store.name(), Cause::NotRun("not ready".into()))
            });
            return self.on_store_failure(req, &plan, domain, reason).await;
        } else {
            let asked = Instant::now();
            let applied = self.store.apply(&plan, mode).await;
            self.store_latency.record(asked.elapsed());
            match applied {
                Ok(o) => o,
                Err(e) => return self.on_store_failure(req, &plan, domain, e).await,
            }
        };
        let decision = assemble(&plan, &outcomes, self.settings.global_shadow);
        self.observe(req, &plan, &outcomes, &decision, domain);
        logging::annotate(|| {
            vec![
                // Spans name a domain as metrics do: configured, or `__unknown__`.
                KeyValue::new(
                    "tollgate.domain",
                    if policy.is_some() {
                        req.domain.clone()
                    } else {
                        UNKNOWN_DOMAIN.to_string()
                    },
                ),
                KeyValue::new("tollgate.descriptors", req.descriptors.len() as i64),
                KeyValue::new("tollgate.charges", plan.charges.len() as i64),
                KeyValue::new(
                    "tollgate.overall_code",
                    match decision.overall {
                        Code::Ok => "OK",
                        Code::OverLimit => "OVER_LIMIT",
                    },
                ),
                KeyValue::new("tollgate.store", self.store.name()),
            ]
        });
        Ok(response(&self.settings, req, &plan, &decision, None))
    }

    /// The failure policy answers for a store that could not decide.
    async fn on_store_failure(
        &self,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        domain: &DomainMetrics,
        error: StoreError,
    ) -> Result<RateLimitResponse, CallError> {
        let policy = self.settings.failure_mode;
        let cause = error.cause.kind();
        if let Some(suppressed) = log_throttle::due("store_failed") {
            tracing::warn!(%error, cause, policy = policy.name(), suppressed, "store failed");
        }
        self.metrics.store_failure(policy.name(), cause);
        if let Some(stats) = self.statistics() {
            stats.service(ServiceEvent::StoreError);
        }
        logging::annotate(|| {
            vec![
                KeyValue::new("error.type", cause),
                KeyValue::new("tollgate.store_failure", error.to_string()),
            ]
        });
        let allow = match policy {
            FailureMode::Error => {
                self.metrics.request(domain, RequestCode::Unavailable);
                let why = match self.store.reason() {
                    Some(reason) if reason.to_string() != error.to_string() => {
                        format!("{error} ({reason})")
                    }
                    _ => error.to_string(),
                };
                return Err(CallError::Unavailable(format!(
                    "rate limit store unavailable: {why}"
                )));
            }
            FailureMode::Allow => true,
            FailureMode::Deny => false,
            FailureMode::Local => return self.decide_locally(req, plan, domain).await,
        };
        let decision = decision::on_store_failure(plan, allow, self.settings.global_shadow);
        let code = match decision.overall {
            Code::Ok => RequestCode::Ok,
            Code::OverLimit => RequestCode::OverLimit,
        };
        self.metrics.request(domain, code);
        Ok(response(&self.settings, req, plan, &decision, Some(policy)))
    }

    /// `--failure-mode local`: decides against the in-process limiter, each limit shared out
    /// among `--local-fallback-share` replicas.
    async fn decide_locally(
        &self,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        domain: &DomainMetrics,
    ) -> Result<RateLimitResponse, CallError> {
        let share = self.settings.local_fallback_share.max(1);
        let local = shared_out(plan, share);
        let mode = Mode::charging(self.settings.count_rejected);
        let outcomes = match &self.fallback {
            Some(store) => store
                .apply(&local, mode)
                .await
                .map_err(|e| CallError::Unavailable(e.to_string()))?,
            None => return Err(CallError::Unavailable("no local fallback".into())),
        };
        let decision = assemble(&local, &outcomes, self.settings.global_shadow);
        self.observe(req, &local, &outcomes, &decision, domain);
        Ok(response(
            &self.settings,
            req,
            &local,
            &decision,
            Some(FailureMode::Local),
        ))
    }

    /// Counts the answer per request and per limit (and logs costs no limit can ever grant).
    fn observe(
        &self,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        outcomes: &[ChargeOutcome],
        decision: &Decision<'_>,
        domain: &DomainMetrics,
    ) {
        let code = match decision.overall {
            Code::Ok => RequestCode::Ok,
            Code::OverLimit => RequestCode::OverLimit,
        };
        self.metrics.request(domain, code);
        if let Some(stats) = self.statistics() {
            count_statistics(stats, req, plan, outcomes, decision, &self.settings);
        }
        for (c, o) in plan.charges.iter().zip(outcomes) {
            let capacity = c.limit.params.capacity();
            let used = capacity.saturating_sub(o.remaining);
            let result = LimitResult::of(o.allowed, c.role == Role::Shadow, used, capacity);
            self.metrics
                .limit(domain, &c.limit.metric_label)
                .observe(result, c.cost);
        }
        for (s, d) in decision.statuses.iter().zip(&req.descriptors) {
            if s.code == Code::OverLimit {
                self.top.record(&req.domain, &d.entries);
            }
        }
        for (i, s) in decision.statuses.iter().enumerate() {
            if s.unsatisfiable {
                if let Some(suppressed) = log_throttle::due("unsatisfiable") {
                    tracing::info!(
                        domain = %req.domain,
                        descriptor = i,
                        limit = s.limit.map_or("", |l| l.name.as_str()),
                        suppressed,
                        "cost exceeds what the limit can ever grant"
                    );
                }
            }
        }
    }

    /// `fallback` is the in-process limiter `--failure-mode local` decides against while
    /// `store` fails (`None`: that mode answers UNAVAILABLE); whoever builds the limiter
    /// supplies it, as it supplies `store`.
    pub fn new(
        config: Arc<ArcSwap<Config>>,
        store: Arc<S>,
        settings: Settings,
        metrics: Arc<Metrics>,
        fallback: Option<MemoryStore>,
    ) -> Self {
        RateLimiter {
            in_flight: Semaphore::new(settings.max_in_flight.max(1)),
            store_latency: crate::telemetry::latency::LatencyWindow::default(),
            top: crate::telemetry::top::Top::default(),
            config,
            store,
            settings,
            metrics,
            fallback,
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn statistics(&self) -> Option<&Statistics> {
        self.metrics.statistics.as_deref()
    }

    /// Who is being limited right now.
    pub fn top(&self) -> &crate::telemetry::top::Top {
        &self.top
    }

    /// The store's decision latency over the last minute.
    pub fn store_latency(&self) -> &crate::telemetry::latency::LatencyWindow {
        &self.store_latency
    }

    pub fn store(&self) -> &Arc<S> {
        &self.store
    }
}

/// envoyproxy/ratelimit's statistics for one decided request: each charge counts into its
/// rule's statistics, in hits, with the limit's usage before and after (for a charge that
/// did not land, what it would have been).
fn count_statistics(
    stats: &Statistics,
    req: &RateLimitRequest,
    plan: &Plan<'_>,
    outcomes: &[ChargeOutcome],
    decision: &Decision<'_>,
    settings: &Settings,
) {
    let verdict = decision::plan_verdict(plan, outcomes);
    let ratio = stats.near_limit_ratio();
    for (c, o) in plan.charges.iter().zip(outcomes) {
        let limit = c.limit.params.capacity();
        let overdraft = c.limit.params.overdraft;
        let landed =
            settings.count_rejected || (verdict.lands(overdraft) && (o.allowed || overdraft));
        let used = limit.saturating_sub(o.remaining);
        let (before, after) = match landed {
            true => (used.saturating_sub(c.cost), used),
            false => (used, used.saturating_add(c.cost)),
        };
        let observation = Observation {
            hits: c.cost,
            limit,
            before,
            after,
            over: !o.allowed,
            shadow: c.role == Role::Shadow,
        };
        let entries = req
            .descriptors
            .get(c.descriptor)
            .map_or(&[][..], |d| &d.entries[..]);
        match c.stats {
            Some(binding) => binding.with(entries, stats, |s| s.observe(observation, ratio)),
            None => {
                if let Some(s) = stats.dynamic(&name::override_name(&req.domain, entries)) {
                    s.observe(observation, ratio);
                }
            }
        }
    }
    if settings.global_shadow && decision.statuses.iter().any(|s| s.code == Code::OverLimit) {
        stats.service(ServiceEvent::GlobalShadowMode);
    }
}
