//! The rate limit service: proto request in, proto response out. Validates, plans against the
//! current config, lets the store decide, and maps the [`Decision`] to Envoy's response
//! (statuses, overall code, optional headers and dynamic metadata). No algorithm logic here.
//!
//! Both the gRPC service and the HTTP `/json` endpoint call [`RateLimiter::should_rate_limit`].

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use prost_types::value::Kind;

use crate::config::Config;
use crate::decision::{decide, Code, Decision, Status};
use crate::metrics::{inc, Metrics};
use crate::pb::core::HeaderValue;
use crate::pb::rls::rate_limit_response::{self as resp, DescriptorStatus};
use crate::pb::rls::rate_limit_service_server::RateLimitService;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};
use crate::plan::{plan, DescriptorKind, Plan};
use crate::store::{ApplyMode, Store};
use crate::validate::{validate, Bounds};

/// Header names for `--response-headers` (IETF draft names, as envoyproxy/ratelimit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
    pub retry_after: String,
}

impl Default for HeaderNames {
    fn default() -> HeaderNames {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
            retry_after: "Retry-After".into(),
        }
    }
}

/// What to answer when the store cannot decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FailureMode {
    /// gRPC UNAVAILABLE: Envoy's `failure_mode_deny` decides.
    #[default]
    Error,
    /// OK for every descriptor.
    Allow,
    /// OVER_LIMIT for every limited descriptor.
    Deny,
}

/// Behaviour switches of the service.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub count_rejected: bool,
    pub global_shadow: bool,
    pub headers: Option<HeaderNames>,
    pub dynamic_metadata: bool,
    pub bounds: Bounds,
    pub failure_mode: FailureMode,
}

/// Why a call failed, mapped to a gRPC status or an HTTP code by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    InvalidArgument(String),
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
            match self.store.apply(&plan.charges, mode).await {
                Ok(o) => o,
                Err(e) => return self.on_store_failure(req, &plan, e.0),
            }
        };
        let decision = decide(&plan, &outcomes, self.settings.global_shadow);
        for (i, s) in decision.statuses.iter().enumerate() {
            if s.unsatisfiable {
                inc(&self.metrics.unsatisfiable);
                tracing::info!(
                    domain = %req.domain,
                    descriptor = i,
                    limit = s.limit.map_or("", |l| l.name.as_str()),
                    "cost exceeds what the limit can ever grant"
                );
            }
        }
        Ok(self.response(req, &plan, &decision, false))
    }

    fn on_store_failure(
        &self,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        error: String,
    ) -> Result<RateLimitResponse, CallError> {
        tracing::warn!(%error, policy = ?self.settings.failure_mode, "store failed");
        let m = &self.metrics;
        let code = match self.settings.failure_mode {
            FailureMode::Error => {
                inc(&m.store_failure_error);
                return Err(CallError::Unavailable(format!(
                    "rate limit store unavailable: {error}"
                )));
            }
            FailureMode::Allow => {
                inc(&m.store_failure_allow);
                Code::Ok
            }
            FailureMode::Deny => {
                inc(&m.store_failure_deny);
                Code::OverLimit
            }
        };
        let statuses: Vec<Status<'_>> = plan
            .descriptors
            .iter()
            .map(|d| {
                let limit = (d.kind == DescriptorKind::Limited)
                    .then(|| plan.charges[d.charges.start].limit.as_ref());
                Status {
                    code: if limit.is_some() { code } else { Code::Ok },
                    limit,
                    remaining: 0,
                    wait_us: None,
                    unsatisfiable: false,
                }
            })
            .collect();
        let overall = if statuses.iter().any(|s| s.code == Code::OverLimit) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let decision = Decision {
            overall,
            statuses,
            shadowed: false,
        };
        Ok(self.response(req, plan, &decision, true))
    }

    fn response(
        &self,
        req: &RateLimitRequest,
        plan: &Plan<'_>,
        decision: &Decision<'_>,
        store_failed: bool,
    ) -> RateLimitResponse {
        let m = &self.metrics;
        inc(match decision.overall {
            Code::Ok => &m.ok,
            Code::OverLimit => &m.over_limit,
        });
        if decision.shadowed {
            inc(&m.shadow_over);
        }
        let statuses = decision.statuses.iter().map(proto_status).collect();
        let mut out = RateLimitResponse {
            overall_code: proto_code(decision.overall),
            statuses,
            ..Default::default()
        };
        if let Some(names) = &self.settings.headers {
            out.response_headers_to_add = headers(names, decision);
        }
        if store_failed {
            out.response_headers_to_add.push(HeaderValue {
                key: "x-tollgate-store-failure".into(),
                value: format!("{:?}", self.settings.failure_mode).to_ascii_lowercase(),
                raw_value: Vec::new(),
            });
        }
        if self.settings.dynamic_metadata {
            out.dynamic_metadata = Some(metadata(req, plan, decision));
        }
        out
    }
}

fn proto_code(c: Code) -> i32 {
    match c {
        Code::Ok => resp::Code::Ok as i32,
        Code::OverLimit => resp::Code::OverLimit as i32,
    }
}

/// Whole seconds, rounded up: Envoy reads only the seconds, and an early retry is a lie.
fn ceil_secs(us: u64) -> u64 {
    us.div_ceil(1_000_000)
}

fn proto_status(s: &Status<'_>) -> DescriptorStatus {
    DescriptorStatus {
        code: proto_code(s.code),
        current_limit: s.limit.map(|l| resp::RateLimit {
            name: l.name.clone(),
            requests_per_unit: l.requests_per_unit,
            unit: l.unit.proto(),
        }),
        limit_remaining: s.remaining,
        duration_until_reset: s.limit.and(s.wait_us).map(|us| prost_types::Duration {
            seconds: ceil_secs(us) as i64,
            nanos: 0,
        }),
        quota: None,
    }
}

/// `RateLimit-*` describe the status that matters most: an over-limit one (the longest wait)
/// or else the one with least remaining. `Retry-After` is the longest wait among over ones.
fn headers(names: &HeaderNames, d: &Decision<'_>) -> Vec<HeaderValue> {
    let limited = || d.statuses.iter().filter(|s| s.limit.is_some());
    let over = || limited().filter(|s| s.code == Code::OverLimit);
    let pick = over()
        .max_by_key(|s| s.wait_us.unwrap_or(u64::MAX))
        .or_else(|| limited().min_by_key(|s| s.remaining));
    let Some(s) = pick else {
        return Vec::new();
    };
    let h = |key: &str, value: String| HeaderValue {
        key: key.to_string(),
        value,
        raw_value: Vec::new(),
    };
    let mut out = vec![
        h(
            &names.limit,
            s.limit.map_or(0, |l| l.requests_per_unit).to_string(),
        ),
        h(&names.remaining, s.remaining.to_string()),
        h(&names.reset, ceil_secs(s.wait_us.unwrap_or(0)).to_string()),
    ];
    if d.overall == Code::OverLimit {
        if let Some(wait) = over().filter_map(|s| s.wait_us).max() {
            out.push(h(&names.retry_after, ceil_secs(wait).to_string()));
        }
    }
    out
}

/// envoyproxy/ratelimit's dynamic metadata (domain, descriptors, hitsAddend, merged rule
/// metadata of the descriptors that passed), plus `unsatisfiable` reasons.
fn metadata(req: &RateLimitRequest, plan: &Plan<'_>, d: &Decision<'_>) -> prost_types::Struct {
    let mut fields = BTreeMap::new();
    fields.insert("domain".to_string(), string(&req.domain));
    let descriptors = req
        .descriptors
        .iter()
        .map(|desc| {
            let mut f = BTreeMap::new();
            let entries = desc
                .entries
                .iter()
                .map(|e| string(&format!("{}={}", e.key, e.value)))
                .collect();
            f.insert("entries".to_string(), list(entries));
            if let Some(l) = &desc.limit {
                let mut lf = BTreeMap::new();
                lf.insert("requestsPerUnit".into(), number(l.requests_per_unit as f64));
                lf.insert("unit".into(), number(l.unit as f64));
                f.insert("limit".to_string(), structure(lf));
            }
            if let Some(h) = desc.hits_addend {
                f.insert("hitsAddend".to_string(), number(h as f64));
            }
            structure(f)
        })
        .collect();
    fields.insert("descriptors".to_string(), list(descriptors));
    if req.hits_addend != 0 {
        fields.insert("hitsAddend".to_string(), number(req.hits_addend as f64));
    }
    let mut merged = serde_json::Map::new();
    for (dp, s) in plan.descriptors.iter().zip(&d.statuses) {
        if let (Some(m), Code::Ok) = (dp.metadata, s.code) {
            merge_json(&mut merged, m);
        }
    }
    if !merged.is_empty() {
        fields.insert(
            "metadata".to_string(),
            json_to_value(&serde_json::Value::Object(merged)),
        );
    }
    let unsatisfiable: Vec<prost_types::Value> = d
        .statuses
        .iter()
        .enumerate()
        .filter(|(_, s)| s.unsatisfiable)
        .map(|(i, s)| {
            string(&format!(
                "descriptor {i}: cost exceeds what limit '{}' can ever grant",
                s.limit.map_or("", |l| l.name.as_str())
            ))
        })
        .collect();
    if !unsatisfiable.is_empty() {
        fields.insert("unsatisfiable".to_string(), list(unsatisfiable));
    }
    prost_types::Struct { fields }
}

/// First value wins on a conflicting key; maps merge recursively.
fn merge_json(
    into: &mut serde_json::Map<String, serde_json::Value>,
    from: &serde_json::Map<String, serde_json::Value>,
) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (Some(serde_json::Value::Object(a)), serde_json::Value::Object(b)) => merge_json(a, b),
            (Some(_), _) => {}
            (None, v) => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

fn string(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

fn number(n: f64) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<prost_types::Value>) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::ListValue(prost_types::ListValue { values })),
    }
}

fn structure(fields: BTreeMap<String, prost_types::Value>) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StructValue(prost_types::Struct { fields })),
    }
}

fn json_to_value(v: &serde_json::Value) -> prost_types::Value {
    use serde_json::Value as J;
    prost_types::Value {
        kind: Some(match v {
            J::Null => Kind::NullValue(0),
            J::Bool(b) => Kind::BoolValue(*b),
            J::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
            J::String(s) => Kind::StringValue(s.clone()),
            J::Array(a) => Kind::ListValue(prost_types::ListValue {
                values: a.iter().map(json_to_value).collect(),
            }),
            J::Object(o) => Kind::StructValue(prost_types::Struct {
                fields: o
                    .iter()
                    .map(|(k, v)| (k.clone(), json_to_value(v)))
                    .collect(),
            }),
        }),
    }
}

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
