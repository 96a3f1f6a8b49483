//! Proto3 JSON for the HTTP `/json` endpoint and `tollgate query --json`: a `RateLimitRequest`
//! in, a `RateLimitResponse` out, by the protobuf JSON mapping as `prost-reflect` implements it
//! (lowerCamelCase names, original names accepted, 64-bit integers as strings or numbers, enums
//! by name or number, well-known types such as `Duration` and `Struct` in their JSON forms,
//! default values omitted, unknown fields rejected) over the descriptors `build.rs` compiles.

use std::sync::LazyLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde_json::Value;

use crate::pb::rls::rate_limit_response::Code;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};

static DESCRIPTORS: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(
        include_bytes!(concat!(env!("OUT_DIR"), "/rls_descriptors.bin")).as_ref(),
    )
    .expect("build.rs writes a valid descriptor set")
});

fn descriptor(name: &str) -> MessageDescriptor {
    DESCRIPTORS
        .get_message_by_name(name)
        .unwrap_or_else(|| panic!("{name} is in the compiled protos"))
}

/// A `/json` request body that is not a `RateLimitRequest` (answered 400 with this message).
#[derive(Debug, thiserror::Error)]
pub enum JsonRequestError {
    #[error("invalid request: {0}")]
    Json(#[source] serde_json::Error),
}

/// Parses a proto3 JSON `RateLimitRequest`.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, JsonRequestError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let message = DynamicMessage::deserialize_with_options(
        descriptor("envoy.service.ratelimit.v3.RateLimitRequest"),
        &mut json,
        &DeserializeOptions::new(),
    )
    .map_err(JsonRequestError::Json)?;
    json.end().map_err(JsonRequestError::Json)?;
    Ok(message
        .transcode_to()
        .expect("a RateLimitRequest decodes as one"))
}

/// The proto enum name of a response code (`OK`, `OVER_LIMIT`, `UNKNOWN`).
pub fn code_name(c: i32) -> &'static str {
    Code::try_from(c).map_or("UNKNOWN", |c| c.as_str_name())
}

/// Renders a response as proto3 JSON (defaults omitted).
pub fn render_response(r: &RateLimitResponse) -> Value {
    let message = DynamicMessage::decode(
        descriptor("envoy.service.ratelimit.v3.RateLimitResponse"),
        r.encode_to_vec().as_slice(),
    )
    .expect("a RateLimitResponse decodes as one");
    serde_json::to_value(&message).expect("a message renders as JSON")
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
    fn renders_every_field_as_the_mapping_says() {
        use crate::pb::core::HeaderValue;
        use crate::pb::rls::rate_limit_response::{DescriptorStatus, RateLimit};
        use prost_types::value::Kind;
        let response = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(RateLimit {
                        name: "per-tenant".into(),
                        requests_per_unit: 5,
                        unit: 2,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(prost_types::Duration {
                        seconds: 42,
                        nanos: 0,
                    }),
                    ..Default::default()
                },
                DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: 7,
                    ..Default::default()
                },
            ],
            response_headers_to_add: vec![HeaderValue {
                key: "x-ratelimit-limit".into(),
                value: "5".into(),
                ..Default::default()
            }],
            dynamic_metadata: Some(prost_types::Struct {
                fields: [(
                    "hits".to_string(),
                    prost_types::Value {
                        kind: Some(Kind::NumberValue(3.0)),
                    },
                )]
                .into(),
            }),
            ..Default::default()
        };
        assert_eq!(
            render_response(&response),
            serde_json::json!({
                "overallCode": "OVER_LIMIT",
                "statuses": [
                    {
                        "code": "OVER_LIMIT",
                        "currentLimit": {"name": "per-tenant", "requestsPerUnit": 5, "unit": "MINUTE"},
                        "durationUntilReset": "42s"
                    },
                    {"code": "OK", "limitRemaining": 7}
                ],
                "responseHeadersToAdd": [{"key": "x-ratelimit-limit", "value": "5"}],
                "dynamicMetadata": {"hits": 3.0}
            })
        );
    }

    #[test]
    fn rejects_unknown_fields_and_bad_numbers() {
        assert!(parse_request(br#"{"domain":"d","bogus":1}"#).is_err());
        assert!(parse_request(br#"{"domain":"d","hitsAddend":-1}"#).is_err());
        assert!(parse_request(br#"{"domain":"d","hitsAddend":4294967296}"#).is_err());
        assert!(parse_request(br#"{"domain":"d"} trailing"#).is_err());
        assert!(parse_request(br#"not json"#).is_err());
    }
}
