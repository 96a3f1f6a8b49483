//! The one place a call is reported, once, after it ended: tollgate's metrics,
//! envoyproxy/ratelimit's statistics, who is being limited, the store's latency window, the
//! trace span's attributes and the throttled log lines. The service hands over what happened
//! ([`Report`]: the request, how it ended, the decision) and never calls a telemetry helper
//! itself.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;

use crate::algorithm::concurrency::SlotId;
use crate::algorithm::rule::{ChargeOutcome, Role};
use crate::base::clock::{Clock, SystemClock};
use crate::base::log_throttle;
use crate::pb::rls::RateLimitRequest;
use crate::plan::Plan;
use crate::service::answer::{Answered, AnsweredBy, Ended, SettleDone, SlotsDone};
use crate::service::budgets::{is_budget, Budgets};
use crate::service::decision::{plan_verdict, Code, Decision};
use crate::service::error::CallError;
use crate::service::settings::Settings;
use crate::telemetry::counted::{LimitResult, RequestCode};
use crate::telemetry::latency::LatencyWindow;
use crate::telemetry::logging;
use crate::telemetry::metrics::{DomainMetrics, Metrics, UNKNOWN_DOMAIN};
use crate::telemetry::stats::name;
use crate::telemetry::stats::registry::{Observation, ServiceEvent, Statistics};
use crate::telemetry::top::Top;

/// Distinct unknown domain names logged per minute at most.
const UNKNOWN_NAMES_PER_MINUTE: usize = 10;

/// Everything a call is reported to.
pub struct Observer {
    pub metrics: Arc<Metrics>,
    /// How long the store took to decide, over the last minute (the status page).
    pub store_latency: LatencyWindow,
    /// The descriptors most often answered OVER_LIMIT, per domain (`GET /top`).
    pub top: Top,
    /// Each budget's biggest spenders in its period (`GET /budgets`, the status page).
    pub budgets: Budgets,
}

/// One call, as it ended.
pub struct Report<'a, 'c> {
    pub req: &'a RateLimitRequest,
    /// The request's domain is configured.
    pub known: bool,
    pub started: Instant,
    /// The store's name, for the span.
    pub store: &'static str,
    pub ended: &'a Ended<'c>,
    /// The decision, for an answered call.
    pub decision: Option<&'a Decision<'a>>,
}

impl Observer {
    pub fn new(metrics: Arc<Metrics>) -> Observer {
        Observer {
            metrics,
            store_latency: LatencyWindow::default(),
            top: Top::default(),
            budgets: Budgets::default(),
        }
    }

    fn statistics(&self) -> Option<&Statistics> {
        self.metrics.statistics.as_deref()
    }

    /// Reports a call refused before it was looked at (`--max-in-flight`).
    pub fn overloaded(&self, req: &RateLimitRequest, known: bool) {
        self.unknown_domain(req, known);
        let domain = self.domain(req, known);
        self.metrics.request(&domain, RequestCode::Overloaded);
    }

    /// Reports a call that was looked at.
    pub fn observe(&self, r: &Report<'_, '_>, settings: &Settings) {
        self.unknown_domain(r.req, r.known);
        if let Some(stats) = self.statistics().filter(|_| !r.known) {
            stats.domain_not_found(&r.req.domain, r.req.descriptors.len() as u64);
        }
        let domain = self.domain(r.req, r.known);
        if let Some(release) = &r.ended.release {
            match &release.done {
                Ok(Some(done)) => self.metrics.slots("release", done.limits),
                Ok(None) => {}
                // The slots stay held until their hold runs out.
                Err(e) => {
                    if let Some(suppressed) = log_throttle::due("release_failed") {
                        tracing::warn!(error = %e, suppressed, "a slot release failed: its slots are held until their lease ends");
                    }
                }
            }
        }
        if let Some(settle) = &r.ended.settle {
            match &settle.done {
                Ok(Some(done)) => self.settled(settle.id, done),
                Ok(None) => {}
                Err(e) => {
                    if let Some(suppressed) = log_throttle::due("settle_failed") {
                        tracing::warn!(error = %e, suppressed, "a settle failed: the reservation's estimate stays charged");
                    }
                }
            }
        }
        if let Some((error, policy)) = &r.ended.store_failed {
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
        }
        if let Ok(answer) = &r.ended.result {
            if answer.held_us > 0 {
                self.metrics.held.inc();
                self.metrics
                    .held_seconds
                    .inc_by(answer.held_us as f64 / 1e6);
            }
            if answer.held_full {
                self.metrics.held_full.inc();
            }
        }
        match (&r.ended.result, r.decision) {
            (Ok(answer), Some(decision)) => self.answered(r, answer, decision, &domain, settings),
            (Ok(_), None) => {}
            (Err(e), _) => self.failed(e, &domain),
        }
        let elapsed = r.started.elapsed().as_secs_f64();
        self.metrics.decision_duration.observe(elapsed);
        if let Some(stats) = self.statistics() {
            stats.call(elapsed * 1000.0);
        }
    }

    /// Reports a settle: `settled`, or `unknown` (with a debug line) when the id had no record.
    pub fn settled(&self, id: SlotId, done: &SettleDone) {
        if done.limits > 0 {
            self.metrics.settle("settled");
        } else {
            self.metrics.settle("unknown");
            tracing::debug!(
                id = %crate::service::slots::format_id(id),
                "settle of a reservation already settled, expired or never issued: nothing changed"
            );
        }
    }

    /// Reports a release or a renew made by a direct caller (`tollgate.slots.v1.Slots`).
    pub fn slots(&self, mode: &'static str, done: &SlotsDone) {
        self.metrics.slots(mode, done.limits);
    }

    fn domain(&self, req: &RateLimitRequest, known: bool) -> Arc<DomainMetrics> {
        self.metrics
            .domain(if known { &req.domain } else { UNKNOWN_DOMAIN })
    }

    /// No limit applies to a domain nobody configured: say so, or a typo in Envoy's `domain`
    /// is a silent fail-open. Names come from callers, so at most `UNKNOWN_NAMES_PER_MINUTE`
    /// distinct ones are written per minute.
    fn unknown_domain(&self, req: &RateLimitRequest, known: bool) {
        if known {
            return;
        }
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

    fn failed(&self, e: &CallError, domain: &DomainMetrics) {
        match e {
            CallError::Invalid(_) => {
                self.metrics.request(domain, RequestCode::Invalid);
                if let Some(stats) = self.statistics() {
                    stats.service(ServiceEvent::ServiceError);
                }
            }
            CallError::Unavailable(_) => self.metrics.request(domain, RequestCode::Unavailable),
            CallError::Overloaded(_) => self.metrics.request(domain, RequestCode::Overloaded),
            // Decided by the listener, after the service was done.
            CallError::DeadlineExceeded => {}
        }
    }

    fn answered(
        &self,
        r: &Report<'_, '_>,
        answer: &Answered<'_>,
        decision: &Decision<'_>,
        domain: &DomainMetrics,
        settings: &Settings,
    ) {
        let code = match decision.overall {
            Code::Ok => RequestCode::Ok,
            Code::OverLimit => RequestCode::OverLimit,
        };
        let req = answer.request(r.req);
        if answer.reserving {
            let reserved = decision.overall == Code::Ok;
            self.metrics
                .reservation(if reserved { "reserved" } else { "refused" });
        }
        match answer.by {
            AnsweredBy::Disabled => self.metrics.request(domain, RequestCode::Disabled),
            AnsweredBy::Policy(_) => self.metrics.request(domain, code),
            AnsweredBy::NoEstimate => {
                self.metrics.reservation("no_estimate");
                self.metrics.request(domain, code);
            }
            AnsweredBy::Unpriced => {
                self.metrics.unpriced(&req.domain);
                self.metrics.request(domain, code);
                if let Some(suppressed) = crate::base::log_throttle::due("unpriced") {
                    tracing::info!(
                        domain = %req.domain,
                        suppressed,
                        "request refused: its model or token kind has no price in the domain's prices"
                    );
                }
            }
            AnsweredBy::Nobody | AnsweredBy::Store(_) | AnsweredBy::Local => {
                if let AnsweredBy::Store(took) = answer.by {
                    self.store_latency.record(took);
                }
                self.metrics.request(domain, code);
                self.count(
                    req,
                    &answer.plan,
                    &answer.outcomes,
                    decision,
                    domain,
                    settings,
                );
                if answer.by != AnsweredBy::Local {
                    self.annotate(r, req, &answer.plan, decision);
                }
            }
        }
    }

    /// Counts the answer per limit (metrics and statistics) and per descriptor (who is being
    /// limited), and logs costs no limit can ever grant.
    fn count(
        &self,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        outcomes: &[ChargeOutcome],
        decision: &Decision<'_>,
        domain: &DomainMetrics,
        settings: &Settings,
    ) {
        if let Some(stats) = self.statistics() {
            count_statistics(stats, req, plan, outcomes, decision, settings);
        }
        for (c, o) in plan.charges.iter().zip(outcomes) {
            // The count of a pool's active tenants is not a limit a request is charged.
            if c.limit.params.fair_cap > 0 {
                continue;
            }
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
        self.spent(req, plan, outcomes);
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

    /// What landed on budgets (`spend:` limits, calendar windows), for their biggest
    /// spenders.
    fn spent(&self, req: &RateLimitRequest, plan: &Plan<'_>, outcomes: &[ChargeOutcome]) {
        let mut now_us = None;
        let mut verdict = None;
        for (c, o) in plan.charges.iter().zip(outcomes) {
            if c.cost == 0 || !is_budget(&c.limit) {
                continue;
            }
            let overdraft = c.limit.params.overdraft;
            let v = *verdict.get_or_insert_with(|| plan_verdict(plan, outcomes));
            if !(v.lands(overdraft) && (o.allowed || overdraft)) {
                continue;
            }
            let now = *now_us.get_or_insert_with(|| SystemClock.now_us());
            self.budgets
                .record(&req.domain, &c.limit, &c.key, c.cost, now);
        }
    }

    fn annotate(
        &self,
        r: &Report<'_, '_>,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        decision: &Decision<'_>,
    ) {
        logging::annotate(|| {
            vec![
                // Spans name a domain as metrics do: configured, or `__unknown__`.
                KeyValue::new(
                    "tollgate.domain",
                    if r.known {
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
                KeyValue::new("tollgate.store", r.store),
            ]
        });
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
    let verdict = plan_verdict(plan, outcomes);
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
            // A class's, a tenant's or the active tenants' counter of a pool: its pool's rule
            // counts the request once.
            None if c.limit.params.is_pool_part() => {}
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
