//! `tollgate query`: one ShouldRateLimit call from the command line, printed readably.

use std::fmt::Write as _;

use crate::json::code_name;
use crate::limit::Unit;
use crate::pb::common::rate_limit_descriptor::Entry;
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};

/// Parses `key=value,key2=value2` into a descriptor.
pub fn parse_descriptor(s: &str) -> Result<RateLimitDescriptor, String> {
    let mut entries = Vec::new();
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("'{part}' in descriptor '{s}' is not key=value"))?;
        entries.push(Entry {
            key: k.to_string(),
            value: v.to_string(),
        });
    }
    Ok(RateLimitDescriptor {
        entries,
        ..Default::default()
    })
}

pub async fn run(
    addr: &str,
    domain: &str,
    descriptors: &[String],
    hits: Option<u32>,
) -> anyhow::Result<String> {
    let req = RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors
            .iter()
            .map(|d| parse_descriptor(d))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?,
        hits_addend: hits.unwrap_or(0),
    };
    let mut client = RateLimitServiceClient::connect(addr.to_string()).await?;
    let resp = client.should_rate_limit(req.clone()).await?.into_inner();
    Ok(render(&req, &resp))
}

/// The answer, one line per descriptor.
pub fn render(req: &RateLimitRequest, resp: &RateLimitResponse) -> String {
    let mut out = format!("overall: {}\n", code_name(resp.overall_code));
    for (i, s) in resp.statuses.iter().enumerate() {
        let entries: Vec<String> = req
            .descriptors
            .get(i)
            .map(|d| {
                d.entries
                    .iter()
                    .map(|e| format!("{}={}", e.key, e.value))
                    .collect()
            })
            .unwrap_or_default();
        let _ = write!(out, "[{i}] {}: {}", entries.join(","), code_name(s.code));
        if let Some(l) = &s.current_limit {
            let unit = Unit::from_proto(l.unit).map_or("unknown", Unit::name);
            let name = if l.name.is_empty() {
                String::new()
            } else {
                format!(" ({})", l.name)
            };
            let _ = write!(
                out,
                "  limit {}/{}{}  remaining {}",
                l.requests_per_unit, unit, name, s.limit_remaining
            );
        } else if s.limit_remaining == u32::MAX {
            out.push_str("  unlimited");
        } else {
            out.push_str("  no limit");
        }
        if let Some(d) = &s.duration_until_reset {
            let _ = write!(out, "  reset in {}s", d.seconds);
        }
        out.push('\n');
    }
    for h in &resp.response_headers_to_add {
        let _ = writeln!(out, "header {}: {}", h.key, h.value);
    }
    out
}
