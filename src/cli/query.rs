//! `tollgate query`: one ShouldRateLimit call from the command line, printed readably.

use std::fmt::Write as _;

use crate::admin::json::{code_name, render_response};
use crate::limit::unit::Unit;
use crate::pb::common::rate_limit_descriptor::Entry;
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::rate_limit_response::Code;
use crate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use crate::pb::rls::{RateLimitRequest, RateLimitResponse};

/// A `--descriptor` that does not parse; it names the part and the whole descriptor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error("'{option}' in descriptor '{descriptor}': only ';hits=N' may follow the entries")]
    Option { option: String, descriptor: String },
    #[error("'{hits}' in descriptor '{descriptor}' is not a number of hits")]
    Hits { hits: String, descriptor: String },
    #[error("'{entry}' in descriptor '{descriptor}' is not key=value")]
    Entry { entry: String, descriptor: String },
}

/// Parses `key=value,key2=value2[;hits=N]` into a descriptor; `;hits=N` sets the descriptor's
/// own `hits_addend` (`hits=0` asks without charging).
pub fn parse_descriptor(s: &str) -> Result<RateLimitDescriptor, DescriptorError> {
    let descriptor = || s.to_string();
    let (body, hits_addend) = match s.rsplit_once(';') {
        None => (s, None),
        Some((body, opt)) => {
            let n = opt
                .strip_prefix("hits=")
                .ok_or_else(|| DescriptorError::Option {
                    option: opt.to_string(),
                    descriptor: descriptor(),
                })?;
            let n = n.parse::<u64>().map_err(|_| DescriptorError::Hits {
                hits: n.to_string(),
                descriptor: descriptor(),
            })?;
            (body, Some(n))
        }
    };
    let mut entries = Vec::new();
    for part in body.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(|| DescriptorError::Entry {
            entry: part.to_string(),
            descriptor: descriptor(),
        })?;
        entries.push(Entry {
            key: k.to_string(),
            value: v.to_string(),
        });
    }
    Ok(RateLimitDescriptor {
        entries,
        hits_addend,
        ..Default::default()
    })
}

/// How `tollgate query` prints the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// One readable line per descriptor.
    Text,
    /// The response as proto3 JSON, as Envoy and `/json` spell it.
    Json,
}

/// The answer and the exit code `tollgate query` ends with: 0 for OK, 3 for OVER_LIMIT, 1 for
/// anything else (an error exits 1 before this, a usage error 2).
pub struct Answer {
    pub text: String,
    pub exit_code: u8,
}

pub async fn run(
    addr: &str,
    domain: &str,
    descriptors: &[String],
    hits: Option<u32>,
    output: Output,
) -> anyhow::Result<Answer> {
    let req = RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors
            .iter()
            .map(|d| parse_descriptor(d))
            .collect::<Result<_, _>>()?,
        hits_addend: hits.unwrap_or(0),
    };
    let mut client = RateLimitServiceClient::connect(addr.to_string()).await?;
    let resp = client.should_rate_limit(req.clone()).await?.into_inner();
    let text = match output {
        Output::Text => render(&req, &resp),
        Output::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&render_response(&resp))?
        ),
    };
    let exit_code = match Code::try_from(resp.overall_code) {
        Ok(Code::Ok) => 0,
        Ok(Code::OverLimit) => 3,
        _ => 1,
    };
    Ok(Answer { text, exit_code })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_parse_with_and_without_hits() {
        let d = parse_descriptor("PATH=/a,user=b").unwrap();
        assert_eq!(d.entries.len(), 2);
        assert_eq!(d.entries[1].value, "b");
        assert_eq!(d.hits_addend, None);
        let d = parse_descriptor("PATH=/productpage;hits=0").unwrap();
        assert_eq!(d.entries[0].value, "/productpage");
        assert_eq!(d.hits_addend, Some(0));
        assert_eq!(parse_descriptor("k=v;hits=7").unwrap().hits_addend, Some(7));
        for bad in ["k", "k=v;hits=x", "k=v;cost=1", "k=v;hits=-1"] {
            assert!(parse_descriptor(bad).is_err(), "{bad}");
        }
    }
}
