//! The answer on the wire: a [`Decision`] mapped to Envoy's `RateLimitResponse` — the
//! overall code, one status per descriptor, and optionally rate limit headers and dynamic
//! metadata. Pure; the service calls it last.

use std::collections::BTreeMap;

use prost_types::value::Kind;

use crate::pb::core::HeaderValue;
use crate::pb::rls::rate_limit_response::{self as resp, DescriptorStatus};
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};
use crate::plan::Plan;
use crate::service::decision::{Code, Decision, Status};
use crate::service::settings::{FailureMode, Settings};

/// The dynamic metadata field naming the failure policy that answered for a failed store.
pub const STORE_FAILURE_KEY: &str = "tollgate.store_failure";

/// The response header carrying the same, with `--store-failure-header`.
pub const STORE_FAILURE_HEADER: &str = "x-tollgate-store-failure";

/// The response for `decision`. `store_failed` names the failure policy that answered;
/// `reserved`: the request reserved under its id (see `service::marked`).
pub fn response(
    settings: &Settings,
    req: &RateLimitRequest,
    plan: &Plan<'_>,
    decision: &Decision<'_>,
    store_failed: Option<FailureMode>,
    reserved: bool,
) -> RateLimitResponse {
    let mut out = RateLimitResponse {
        overall_code: proto_code(decision.overall),
        statuses: decision.statuses.iter().map(proto_status).collect(),
        ..Default::default()
    };
    if let Some(names) = &settings.headers {
        out.response_headers_to_add = headers(names, decision);
    }
    if settings.dynamic_metadata {
        out.dynamic_metadata = Some(metadata(req, plan, decision));
    }
    // The slots an OK request took: their id, for Envoy's call when the stream is done (or a
    // direct caller) to release them.
    let hold = plan
        .charges
        .iter()
        .filter(|c| c.limit.params.algorithm == crate::limit::Algorithm::Concurrency)
        .map(|c| c.limit.params.window_us)
        .min();
    if let Some(lease) = hold
        .filter(|_| plan.slot != (0, 0) && decision.overall == Code::Ok && store_failed.is_none())
    {
        let fields = &mut out
            .dynamic_metadata
            .get_or_insert_with(Default::default)
            .fields;
        fields.insert(
            crate::service::slots::SLOT_KEY.to_string(),
            string(&crate::service::slots::format_id(plan.slot)),
        );
        fields.insert(
            crate::service::slots::SLOT_LEASE_KEY.to_string(),
            number((lease / 1000) as f64),
        );
    }
    // A reservation's id, for the call that settles it (Envoy's when the stream is done).
    if reserved {
        out.dynamic_metadata
            .get_or_insert_with(Default::default)
            .fields
            .insert(
                crate::service::marked::RESERVATION_KEY.to_string(),
                string(&crate::service::slots::format_id(plan.slot)),
            );
    }
    // The store-failure marker is for operators (Envoy's access log reads dynamic metadata)
    // and reaches the end client only when asked for: clients should not learn that the
    // limiter is failing open.
    if let Some(mode) = store_failed {
        out.dynamic_metadata
            .get_or_insert_with(Default::default)
            .fields
            .insert(STORE_FAILURE_KEY.to_string(), string(mode.name()));
        if settings.store_failure_header {
            out.response_headers_to_add.push(HeaderValue {
                key: STORE_FAILURE_HEADER.into(),
                value: mode.name().into(),
                raw_value: Vec::new(),
            });
        }
    }
    out
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
fn headers(names: &crate::service::settings::HeaderNames, d: &Decision<'_>) -> Vec<HeaderValue> {
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

/// A JSON value as a `google.protobuf.Value`. Written out rather than through `prost-reflect`
/// (which `src/admin/json.rs` uses for the `/json` endpoint): this runs on the gRPC path for every
/// response that carries metadata, where a `DynamicMessage` would add an encode and a decode.
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
