//! Proto3 JSON for the HTTP `/json` endpoint: a `RateLimitRequest` in, a `RateLimitResponse`
//! out, following the protobuf JSON mapping (lowerCamelCase names, original names accepted,
//! 64-bit integers as strings or numbers, enums by name, default values omitted).

use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};

use crate::limit::{proto_unit_name, proto_unit_number};
use crate::pb::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::rate_limit_response::Code;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "int"
    )]
    hits_addend: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "int"
    )]
    hits_addend: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(
        default,
        alias = "requests_per_unit",
        rename = "requestsPerUnit",
        deserialize_with = "int"
    )]
    requests_per_unit: Option<u64>,
    #[serde(default)]
    unit: Option<Value>,
}

/// Integers may be JSON numbers or strings (proto3 JSON writes 64-bit ones as strings).
fn int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("{n} is not a non-negative integer"))),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("'{s}' is not a non-negative integer"))),
        Some(other) => Err(D::Error::custom(format!(
            "expected an integer, found {other}"
        ))),
    }
}

/// A `/json` request body that is not a `RateLimitRequest` (answered 400 with this message).
#[derive(Debug, thiserror::Error)]
pub enum JsonRequestError {
    #[error("invalid request: {0}")]
    Json(#[source] serde_json::Error),
    #[error("invalid request: hitsAddend does not fit in 32 bits")]
    HitsAddend,
    #[error("invalid request: requestsPerUnit does not fit in 32 bits")]
    RequestsPerUnit,
    #[error("invalid request: unknown unit '{0}'")]
    UnknownUnit(String),
    /// A unit that is neither a name nor an enum number.
    #[error("invalid request: bad unit {0}")]
    BadUnit(Value),
}

fn unit_number(v: &Value) -> Result<i32, JsonRequestError> {
    match v {
        Value::String(s) => {
            proto_unit_number(s).ok_or_else(|| JsonRequestError::UnknownUnit(s.clone()))
        }
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| JsonRequestError::BadUnit(v.clone())),
        other => Err(JsonRequestError::BadUnit(other.clone())),
    }
}

/// Parses a proto3 JSON `RateLimitRequest`.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, JsonRequestError> {
    let r: JsonRequest = serde_json::from_slice(body).map_err(JsonRequestError::Json)?;
    let hits_addend =
        u32::try_from(r.hits_addend.unwrap_or(0)).map_err(|_| JsonRequestError::HitsAddend)?;
    let mut descriptors = Vec::with_capacity(r.descriptors.len());
    for d in r.descriptors {
        let limit = match d.limit {
            None => None,
            Some(l) => Some(RateLimitOverride {
                requests_per_unit: u32::try_from(l.requests_per_unit.unwrap_or(0))
                    .map_err(|_| JsonRequestError::RequestsPerUnit)?,
                unit: match &l.unit {
                    None => 0,
                    Some(u) => unit_number(u)?,
                },
            }),
        };
        descriptors.push(RateLimitDescriptor {
            entries: d
                .entries
                .into_iter()
                .map(|e| Entry {
                    key: e.key,
                    value: e.value,
                })
                .collect(),
            limit,
            hits_addend: d.hits_addend,
        });
    }
    Ok(RateLimitRequest {
        domain: r.domain,
        descriptors,
        hits_addend,
    })
}

/// The proto enum name of a response code (`OK`, `OVER_LIMIT`, `UNKNOWN`).
pub fn code_name(c: i32) -> &'static str {
    Code::try_from(c).map_or("UNKNOWN", |c| c.as_str_name())
}

/// Renders a response as proto3 JSON (defaults omitted).
pub fn render_response(r: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code_name(r.overall_code)));
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut m = Map::new();
            m.insert("code".into(), json!(code_name(s.code)));
            if let Some(l) = &s.current_limit {
                let mut lm = Map::new();
                if !l.name.is_empty() {
                    lm.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lm.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                lm.insert("unit".into(), json!(proto_unit_name(l.unit)));
                m.insert("currentLimit".into(), Value::Object(lm));
            }
            if s.limit_remaining != 0 {
                m.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                m.insert(
                    "durationUntilReset".into(),
                    json!(format!("{}s", d.seconds)),
                );
            }
            Value::Object(m)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(md) = &r.dynamic_metadata {
        out.insert("dynamicMetadata".into(), struct_to_json(md));
    }
    Value::Object(out)
}

fn struct_to_json(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_to_json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_camel_and_snake_case() {
        let r = parse_request(
            br#"{"domain":"d","hits_addend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],
                "limit":{"requestsPerUnit":5,"unit":"MINUTE"},"hitsAddend":"0"}]}"#,
        )
        .unwrap();
        assert_eq!(r.hits_addend, 3);
        assert_eq!(r.descriptors[0].hits_addend, Some(0));
        assert_eq!(r.descriptors[0].limit.unwrap().unit, 2);
    }

    #[test]
    fn rejects_unknown_fields_and_bad_numbers() {
        assert!(parse_request(br#"{"domain":"d","bogus":1}"#).is_err());
        assert!(parse_request(br#"{"domain":"d","hitsAddend":-1}"#).is_err());
        assert!(parse_request(br#"not json"#).is_err());
    }
}
