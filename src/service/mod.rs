//! The rate limit service: one `ShouldRateLimit` call, top to bottom.
//!
//! [`validate`] the request → [`plan`] it against the current config → let the [`Store`]
//! decide its charges atomically (or the failure policy, when it cannot) → the [`Ended`] call
//! gives the decision ([`decision`]) and the answer on the wire ([`respond`]) → [`observe`]
//! reports it, once. No algorithm logic here. The gRPC listener (`serve::grpc`) and the HTTP
//! `/json` endpoint both call [`RateLimiter::should_rate_limit`].
//!
//! [`validate`]: crate::service::validate::validate
//! [`plan`]: crate::plan::pipeline::plan

pub mod answer;
pub mod budgets;
pub mod decision;
pub mod error;
pub mod fallback;
pub mod hold;
pub mod marked;
pub mod observe;
pub mod paired;
pub mod respond;
pub mod settings;
pub mod slots;
pub mod validate;

use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

use crate::algorithm::concurrency::SlotId;
use crate::algorithm::rule::{ChargeOutcome, Mode, Role};
use crate::config::{Config, DomainPolicy};
use crate::limit::Algorithm;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};
use crate::plan::pipeline::plan;
use crate::plan::{Plan, PlannedCharge};
use crate::service::answer::{
    Answered, AnsweredBy, Ended, Released, SettleDone, Settled, SlotsDone,
};
use crate::service::error::{CallError, InvalidRequest, StoreDown};
use crate::service::hold::Hold;
use crate::service::marked::{any_marked, split};
use crate::service::observe::{Observer, Report};
use crate::service::paired::paired;
use crate::service::settings::{FailureMode, Settings};
use crate::service::slots::new_id;
use crate::service::validate::{validate, Bounds};
use crate::store::error::{Cause, StoreError};
use crate::store::memory::MemoryStore;
use crate::store::Store;
use crate::telemetry::latency::LatencyWindow;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::top::Top;

pub struct RateLimiter<S> {
    config: Arc<ArcSwap<Config>>,
    store: Arc<S>,
    settings: Settings,
    /// The in-process limiter of `--failure-mode local`.
    fallback: Option<MemoryStore>,
    /// Permits for decisions in flight (`--max-in-flight`).
    in_flight: Semaphore,
    /// Permits for answers held (`--max-held`, see [`hold`]).
    held: Arc<Semaphore>,
    observer: Observer,
}

impl<S: Store> RateLimiter<S> {
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
            held: Arc::new(Semaphore::new(settings.max_held)),
            observer: Observer::new(metrics),
            config,
            store,
            settings,
            fallback,
        }
    }

    /// What one request may carry.
    pub fn bounds(&self) -> &Bounds {
        &self.settings.bounds
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.observer.metrics
    }

    /// Who is being limited right now.
    pub fn top(&self) -> &Top {
        &self.observer.top
    }

    /// Each budget's biggest spenders in its period.
    pub fn budgets(&self) -> &crate::service::budgets::Budgets {
        &self.observer.budgets
    }

    /// The store's decision latency over the last minute.
    pub fn store_latency(&self) -> &LatencyWindow {
        &self.observer.store_latency
    }

    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, CallError> {
        self.should_rate_limit_by(req, None).await
    }

    /// [`RateLimiter::should_rate_limit`] for a caller whose deadline is `deadline`: no
    /// answer is held past what it leaves (see [`hold`]).
    pub async fn should_rate_limit_by(
        &self,
        req: &RateLimitRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<RateLimitResponse, CallError> {
        let started = Instant::now();
        let config = self.config.load_full();
        let policy = config.domains.get(&req.domain).map(|d| d.policy);
        // A flood is refused at once rather than queued: latency stays bounded for the calls
        // that are answered, and the caller's failure policy decides for the rest.
        let Ok(_permit) = self.in_flight.try_acquire() else {
            self.observer.overloaded(req, policy.is_some());
            return Err(CallError::Overloaded(self.settings.max_in_flight));
        };
        let mut ended = self.answer(req, &config, policy, deadline).await;
        // A held answer waits without an in-flight permit: those count decisions.
        drop(_permit);
        if let Ok(answer) = &mut ended.result {
            if let Some(h) = answer.hold.take() {
                if hold::fits_deadline(h.us, deadline) {
                    answer.held_us = h.us;
                    hold::held(&self.store, h).await;
                } else {
                    // The decision took what the wait needed: refused, its place given back.
                    hold::refuse(&answer.plan, &mut answer.outcomes);
                    drop(hold::GiveBack::new(self.store.clone(), h.taken));
                }
            }
        }
        let report = |decision| Report {
            req,
            known: policy.is_some(),
            started,
            store: self.store.name(),
            ended: &ended,
            decision,
        };
        match &ended.result {
            Ok(answer) => {
                let decision = answer.decision(self.settings.global_shadow);
                self.observer
                    .observe(&report(Some(&decision)), &self.settings);
                Ok(answer.response(&self.settings, req, &decision))
            }
            Err(e) => {
                self.observer.observe(&report(None), &self.settings);
                Err(e.clone())
            }
        }
    }

    /// Releases or renews (`mode`) the slots `id` holds on the concurrency limits `req`'s
    /// descriptors reach; nothing else is charged or touched. The store's answer is due
    /// before the caller's `deadline` (see [`hold::due`]).
    pub async fn slots(
        &self,
        req: &RateLimitRequest,
        id: SlotId,
        mode: Mode,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<SlotsDone, CallError> {
        validate(req, &self.settings.bounds).map_err(InvalidRequest::from)?;
        let done = self.run_slots(req, id, mode, deadline).await?;
        if let Some(done) = &done {
            self.observer.slots(mode.name(), done);
        }
        Ok(done.unwrap_or_default())
    }

    /// Settles the reservation `id` on the limits `req`'s descriptors reach, each descriptor's
    /// cost the actual use (a direct caller's settle; Envoy's is a marked descriptor).
    pub async fn settle(
        &self,
        req: &RateLimitRequest,
        id: SlotId,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<SettleDone, CallError> {
        validate(req, &self.settings.bounds).map_err(InvalidRequest::from)?;
        let done = self
            .run_settle(req, id, deadline)
            .await?
            .unwrap_or_default();
        self.observer.settled(id, &done);
        Ok(done)
    }

    /// The call, decided: a release and a settle first if the request carries them, then its
    /// other descriptors (a reservation if one of them says so; see `marked`).
    async fn answer<'c>(
        &self,
        req: &RateLimitRequest,
        config: &'c Config,
        policy: Option<DomainPolicy>,
        deadline: Option<tokio::time::Instant>,
    ) -> Ended<'c> {
        let invalid = |e: InvalidRequest| Ended::refused(e.into());
        if let Err(e) = validate(req, &self.settings.bounds) {
            return invalid(e.into());
        }
        let disabled = self.settings.disabled || policy.is_some_and(|p| p.disabled);
        let charging = Mode::charging(self.settings.count_rejected);
        if !any_marked(req) {
            let pair_keys = &self.settings.reservation_pair_keys;
            if !pair_keys.is_empty() && !disabled {
                if let Some((id, normal)) = paired(req, pair_keys) {
                    return self.pair(&normal, id, config, policy, deadline).await;
                }
            }
            return self
                .decide(req, config, policy, disabled, How::new(charging, deadline))
                .await;
        }
        let marked = match split(req, policy.and_then(|p| p.default_estimate)) {
            Ok(m) => m,
            Err(e) => return invalid(e.into()),
        };
        let mut released = None;
        let mut settled = None;
        if !disabled {
            if let Some((id, descriptors)) = marked.release {
                let release = RateLimitRequest {
                    domain: req.domain.clone(),
                    descriptors,
                    hits_addend: 0,
                };
                let done = self.run_slots(&release, id, Mode::Release, deadline).await;
                released = Some(Released { id, done });
            }
            if let Some((id, descriptors)) = marked.settle {
                let settle = RateLimitRequest {
                    domain: req.domain.clone(),
                    descriptors,
                    hits_addend: req.hits_addend,
                };
                let done = self.run_settle(&settle, id, deadline).await;
                settled = Some(Settled { id, done });
            }
        }
        let rest = marked.rest;
        let mut ended = if rest.descriptors.is_empty() {
            Ended::answered(Plan::no_limits(0), Vec::new(), AnsweredBy::Nobody)
        } else if !marked.refused.is_empty() && !disabled {
            // A reservation without an estimate where the domain has no default: refused,
            // nothing asked of the store.
            Ended::answered(
                Plan::no_limits(rest.descriptors.len()),
                Vec::new(),
                AnsweredBy::NoEstimate,
            )
        } else {
            let mode = if marked.reserve {
                Mode::Reserve
            } else {
                charging
            };
            self.decide(&rest, config, policy, disabled, How::new(mode, deadline))
                .await
        };
        ended.release = released;
        ended.settle = settled;
        if let Ok(answer) = &mut ended.result {
            answer.refused = marked.refused;
            answer.rest = Some((rest, marked.answered));
        }
        ended
    }

    /// One call of a pair (`--reservation-pair-keys`, see `paired`): a settle of `id` when a
    /// reservation is recorded under it, else a reservation under it. `req` is the request
    /// with its pair values emptied.
    async fn pair<'c>(
        &self,
        req: &RateLimitRequest,
        id: SlotId,
        config: &'c Config,
        policy: Option<DomainPolicy>,
        deadline: Option<tokio::time::Instant>,
    ) -> Ended<'c> {
        // The second call: the record is there (a settle that finds none changes nothing).
        // A store that cannot settle cannot reserve either: the reservation below meets the
        // failure policy.
        if let Ok(Some(done)) = self.run_settle(req, id, deadline).await {
            if done.limits > 0 {
                let plan = Plan::no_limits(req.descriptors.len());
                let mut ended = Ended::answered(plan, Vec::new(), AnsweredBy::Nobody);
                ended.settle = Some(Settled {
                    id,
                    done: Ok(Some(done)),
                });
                return ended;
            }
        }
        let how = How {
            id: Some(id),
            ..How::new(Mode::Reserve, deadline)
        };
        self.decide(req, config, policy, false, how).await
    }

    /// Settles the reservation `id` on the counters `req`'s descriptors reach, each
    /// descriptor's cost the actual use; `None` when they reach no limit a reservation
    /// charges. A settle of an id already settled (or never issued) finds no record: every
    /// outcome then says so (`allowed` false) and nothing changes.
    async fn run_settle(
        &self,
        req: &RateLimitRequest,
        id: SlotId,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<SettleDone>, CallError> {
        let config = self.config.load();
        let mut plan = plan(&config, req).map_err(InvalidRequest::from)?;
        if !plan.unpriced.is_empty() {
            // What was used cannot be priced: the reservation keeps its estimate.
            return Ok(None);
        }
        plan.charges
            .retain(|c| c.limit.params.algorithm != Algorithm::Concurrency);
        // The use on one counter is what every descriptor reaching it says (a spend limit's
        // input and output tokens, each priced at its kind's price): one charge each.
        let mut merged: Vec<PlannedCharge<'_>> = Vec::with_capacity(plan.charges.len());
        for c in plan.charges.drain(..) {
            match merged.iter_mut().find(|m| m.key == c.key) {
                Some(m) => m.cost = m.cost.saturating_add(c.cost),
                None => merged.push(c),
            }
        }
        plan.charges = merged;
        for c in &mut plan.charges {
            c.role = Role::Enforced;
        }
        plan.quota_descriptors = 0;
        plan.slot = id;
        plan.due = hold::due(deadline);
        if plan.charges.is_empty() {
            return Ok(None);
        }
        let outcomes = self
            .store
            .apply(&plan, Mode::Settle)
            .await
            .map_err(CallError::store)?;
        Ok(Some(SettleDone {
            limits: outcomes.iter().filter(|o| o.allowed).count() as u32,
            actual: plan.charges.iter().map(|c| c.cost).max().unwrap_or(0),
        }))
    }

    /// A release or renew of a request already validated; `None` when its descriptors reach
    /// no concurrency limit.
    async fn run_slots(
        &self,
        req: &RateLimitRequest,
        id: SlotId,
        mode: Mode,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<SlotsDone>, CallError> {
        let config = self.config.load();
        let mut plan = plan(&config, req).map_err(InvalidRequest::from)?;
        plan.charges
            .retain(|c| c.limit.params.algorithm == Algorithm::Concurrency);
        for c in &mut plan.charges {
            c.role = Role::Enforced;
            c.cost = 1;
        }
        plan.quota_descriptors = 0;
        plan.slot = id;
        plan.due = hold::due(deadline);
        if plan.charges.is_empty() {
            return Ok(None);
        }
        let outcomes = self
            .store
            .apply(&plan, mode)
            .await
            .map_err(CallError::store)?;
        let mut done = SlotsDone::default();
        for (c, o) in plan.charges.iter().zip(&outcomes) {
            if o.allowed {
                done.limits += 1;
                let hold = c.limit.params.window_us;
                done.hold_us = Some(done.hold_us.map_or(hold, |h: u64| h.min(hold)));
            }
        }
        Ok(Some(done))
    }

    /// A valid request without marks: planned and decided by the store in `mode` (`Decide`,
    /// `CountRejected` or `Reserve`), or by the failure policy when the store cannot. A
    /// reservation is recorded under `id`, or a fresh one.
    async fn decide<'c>(
        &self,
        req: &RateLimitRequest,
        config: &'c Config,
        policy: Option<DomainPolicy>,
        disabled: bool,
        how: How,
    ) -> Ended<'c> {
        let How { mode, id, deadline } = how;
        if disabled {
            // The kill switch: OK for every descriptor, nothing read or written.
            let plan = Plan::no_limits(req.descriptors.len());
            return Ended::answered(plan, Vec::new(), AnsweredBy::Disabled);
        }
        if policy.is_some_and(|p| !p.allow_overrides)
            && req.descriptors.iter().any(|d| d.limit.is_some())
        {
            if let Some(suppressed) = crate::base::log_throttle::due("override_ignored") {
                tracing::info!(
                    domain = %req.domain,
                    suppressed,
                    "limit override ignored: the domain has allow_overrides: false"
                );
            }
        }
        let mut plan = match plan(config, req) {
            Ok(p) => p,
            Err(e) => return Ended::refused(InvalidRequest::from(e).into()),
        };
        if mode == Mode::Reserve {
            // A reservation must fit: refused, it charges nothing, in a usage domain too.
            for c in &mut plan.charges {
                if c.limit.params.overdraft {
                    c.limit.to_mut().params.overdraft = false;
                }
            }
        }
        if mode == Mode::Reserve
            || plan
                .charges
                .iter()
                .any(|c| c.limit.params.algorithm == Algorithm::Concurrency)
        {
            plan.slot = id.unwrap_or_else(new_id);
        }
        if plan.charges.is_empty() {
            return Ended::answered(plan, Vec::new(), AnsweredBy::Nobody);
        }
        if !plan.unpriced.is_empty() {
            // A spend limit cannot price a descriptor: refused, nothing asked of the store.
            let refused = plan.unpriced.clone();
            let mut ended = Ended::answered(plan, Vec::new(), AnsweredBy::Unpriced);
            if let Ok(answer) = &mut ended.result {
                answer.refused = refused;
            }
            return ended;
        }
        if self.fallback.is_some() && !self.store.is_ready() {
            // The local fallback answers at once while the store is known to be down.
            let reason = self.store.reason().unwrap_or_else(|| {
                StoreError::new(self.store.name(), Cause::NotRun("not ready".into()))
            });
            return self.on_store_failure(plan, reason).await;
        }
        // Waiting (`max_wait`): up to what the deadline leaves, while `--max-held` allows; a
        // reservation never waits.
        let (mut permit, mut held_full) = (None, false);
        if hold::waits(&plan) {
            permit = match mode {
                Mode::Reserve => None,
                _ => self.held.clone().try_acquire_owned().ok(),
            };
            held_full = permit.is_none() && mode != Mode::Reserve;
            let wait = hold::budget(deadline);
            hold::cap_waits(
                &mut plan,
                permit.as_ref().map_or(0, |_| wait.unwrap_or(u64::MAX)),
            );
            if !hold::waits(&plan) {
                permit = None;
            }
        }
        plan.due = hold::due(deadline);
        let asked = Instant::now();
        let decided = match permit {
            None => self.store.apply(&plan, mode).await.map(|o| (o, None)),
            Some(_) => self
                .store
                .apply_taking(&plan, mode)
                .await
                .map(|(o, taken)| (o, Some(taken))),
        };
        let mut ended = match decided {
            Ok((outcomes, taken)) => {
                let us = hold::hold_of(&plan, &outcomes);
                let mut ended = Ended::answered(plan, outcomes, AnsweredBy::Store(asked.elapsed()));
                if let (Ok(answer), Some(taken), Some(permit)) = (&mut ended.result, taken, permit)
                {
                    answer.hold = (us > 0).then_some(Hold { us, taken, permit });
                }
                ended
            }
            Err(e) => self.on_store_failure(plan, e).await,
        };
        if let Ok(answer) = &mut ended.result {
            answer.reserving = mode == Mode::Reserve;
            answer.held_full = held_full;
        }
        ended
    }

    /// The failure policy answers for a store that could not decide.
    async fn on_store_failure<'c>(&self, plan: Plan<'c>, error: StoreError) -> Ended<'c> {
        let mode = self.settings.failure_mode;
        let result = match mode {
            FailureMode::Error => Err(CallError::Unavailable(StoreDown {
                error: error.clone(),
                reason: self.store.reason(),
            })),
            FailureMode::Allow | FailureMode::Deny => {
                Ok(Answered::new(plan, Vec::new(), AnsweredBy::Policy(mode)))
            }
            FailureMode::Local => self.decide_locally(&plan).await,
        };
        Ended {
            store_failed: Some((error, mode)),
            ..Ended::result(result)
        }
    }

    /// `--failure-mode local`: decides against the in-process limiter, each limit shared out
    /// among `--local-fallback-share` replicas.
    async fn decide_locally<'c>(&self, plan: &Plan<'c>) -> Result<Answered<'c>, CallError> {
        let Some(store) = &self.fallback else {
            let none = StoreError::new("local", Cause::NotRun("no local fallback".into()));
            return Err(CallError::store(none));
        };
        let local = fallback::shared_out(plan, self.settings.local_fallback_share.max(1));
        let mode = Mode::charging(self.settings.count_rejected);
        let outcomes: Vec<ChargeOutcome> =
            store.apply(&local, mode).await.map_err(CallError::store)?;
        Ok(Answered::new(local, outcomes, AnsweredBy::Local))
    }
}

/// How a request is decided: in `mode`, a reservation recorded under `id` (a fresh one when
/// `None`), by the caller's deadline.
struct How {
    mode: Mode,
    id: Option<SlotId>,
    /// The caller's deadline (`grpc-timeout`): the store's answer is due before it
    /// ([`hold::due`]), and no answer is held past it.
    deadline: Option<tokio::time::Instant>,
}

impl How {
    fn new(mode: Mode, deadline: Option<tokio::time::Instant>) -> How {
        How {
            mode,
            id: None,
            deadline,
        }
    }
}
