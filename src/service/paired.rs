//! Reservations paired by a per-request descriptor value, for configs that cannot carry
//! tollgate's marks (Envoy Gateway's and Envoy AI Gateway's, made over xDS).
//!
//! Envoy Gateway writes a rule with a request cost and a response cost as two rate limits with
//! the same actions: one asked when the request arrives (`hits_addend` the request cost), one
//! when the stream is done (`apply_on_stream_done`, `hits_addend` the response cost). Give that
//! rule a distinct match on a value each request has of its own (`x-request-id`, which the
//! edge generates) and name that match's descriptor key in `--reservation-pair-keys`: then
//!
//! - the value never reaches matching or a counter's key: it matches as the key with an empty
//!   value, so every request of a tenant shares the tenant's counter (Envoy Gateway nests the
//!   limit under the distinct key, with no value);
//! - the request's id is a hash of the domain and the values ([`paired`]), the same on both
//!   calls and on every instance;
//! - a call is a settle of that id when a reservation recorded under it is found, and a
//!   reservation under it otherwise: the first call reserves its cost (all-or-nothing, refused
//!   → nothing charged, as `tollgate.reserve`), the second settles with its cost as the
//!   actual use, on the counters the first charged.
//!
//! Whoever can choose the value can settle (end) a reservation under it, so the value must be
//! one the edge makes, never one a client sends (Envoy Gateway's `requestID: Generate`).

use ring::digest::{Context, SHA256};

use crate::algorithm::concurrency::SlotId;
use crate::pb::rls::RateLimitRequest;
use crate::service::slots::id_of;

/// `req` with every entry keyed by one of `keys` emptied, and the id of the values they had:
/// `None` when no descriptor has such an entry with a value (the request is not paired).
pub fn paired(req: &RateLimitRequest, keys: &[String]) -> Option<(SlotId, RateLimitRequest)> {
    let pairs = |k: &str| keys.iter().any(|p| p == k);
    let any = req
        .descriptors
        .iter()
        .flat_map(|d| &d.entries)
        .any(|e| !e.value.is_empty() && pairs(&e.key));
    if !any {
        return None;
    }
    let mut normal = req.clone();
    let mut values: Vec<String> = Vec::new();
    for e in normal.descriptors.iter_mut().flat_map(|d| &mut d.entries) {
        if pairs(&e.key) && !e.value.is_empty() {
            values.push(std::mem::take(&mut e.value));
        }
    }
    // One request's value in several descriptors (a rule each, or a rule asked on the request
    // only) is one value: the stream-done call, which carries only the rules with a response
    // cost, finds the same id.
    values.sort_unstable();
    values.dedup();
    let mut hash = Context::new(&SHA256);
    for s in std::iter::once(&req.domain).chain(&values) {
        hash.update(&(s.len() as u64).to_le_bytes());
        hash.update(s.as_bytes());
    }
    let digest = hash.finish();
    let first: [u8; 16] = digest.as_ref()[..16].try_into().unwrap_or_default();
    Some((id_of(&first), normal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::common::{rate_limit_descriptor::Entry, RateLimitDescriptor};

    fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors: descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .iter()
                        .map(|(k, v)| Entry {
                            key: (*k).into(),
                            value: (*v).into(),
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            hits_addend: 0,
        }
    }

    #[test]
    fn the_pair_value_leaves_the_request_and_names_the_id() {
        let keys = vec!["rule-0-match-1".to_string()];
        let a = request(
            "d",
            &[&[
                ("route", "r"),
                ("rule-0-match-0", "acme"),
                ("rule-0-match-1", "id-1"),
            ]],
        );
        let (id, normal) = paired(&a, &keys).expect("paired");
        assert_eq!(normal.descriptors[0].entries[2].value, "");
        assert_eq!(normal.descriptors[0].entries[1].value, "acme");
        // The same request id: the same id, whatever else the call carries.
        let b = request(
            "d",
            &[&[
                ("route", "r"),
                ("rule-0-match-0", "acme"),
                ("rule-0-match-1", "id-1"),
            ]],
        );
        assert_eq!(paired(&b, &keys).map(|p| p.0), Some(id));
        // Another request id, or another domain: another id.
        let c = request(
            "d",
            &[&[
                ("route", "r"),
                ("rule-0-match-0", "acme"),
                ("rule-0-match-1", "id-2"),
            ]],
        );
        assert_ne!(paired(&c, &keys).map(|p| p.0), Some(id));
        let d = request(
            "e",
            &[&[
                ("route", "r"),
                ("rule-0-match-0", "acme"),
                ("rule-0-match-1", "id-1"),
            ]],
        );
        assert_ne!(paired(&d, &keys).map(|p| p.0), Some(id));
        // The stream-done call carries only the rules with a response cost: the same id.
        let keys = vec!["rule-0-match-1".to_string(), "rule-1-match-0".to_string()];
        let both = request(
            "d",
            &[
                &[("r0", "r0"), ("rule-0-match-1", "id-1")],
                &[("r1", "r1"), ("rule-1-match-0", "id-1")],
            ],
        );
        let one = request("d", &[&[("r1", "r1"), ("rule-1-match-0", "id-1")]]);
        assert_eq!(
            paired(&both, &keys).map(|p| p.0),
            paired(&one, &keys).map(|p| p.0)
        );
        assert!(id.0 > 0 && id.0 < 1 << 52 && id.1 < 1 << 52);
    }

    #[test]
    fn a_request_without_a_pair_value_is_not_paired() {
        let keys = vec!["rule-0-match-1".to_string()];
        assert!(paired(&request("d", &[&[("tenant", "acme")]]), &keys).is_none());
        assert!(paired(&request("d", &[&[("rule-0-match-1", "")]]), &keys).is_none());
        assert!(paired(&request("d", &[&[("rule-0-match-1", "x")]]), &[]).is_none());
    }
}
