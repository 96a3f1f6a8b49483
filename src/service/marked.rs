//! What a request asks besides a decision, said by a descriptor's last entry (taken off before
//! the descriptor is matched): a slot release, a settle, a reservation.
//!
//! - [`RELEASE_KEY`]`=<id>`: frees the concurrency slots the id holds on the limits the rest
//!   of the descriptor reaches (`service::slots`); answered OK with no limit.
//! - [`RESERVE_KEY`]: the request is a *reservation*: all its charges are charged up front,
//!   all-or-nothing as any request, in a usage domain too (a reservation is never an
//!   overdraft), and what landed is recorded under the request's id
//!   (`algorithm::reservation`), which the answer carries in its dynamic metadata
//!   ([`RESERVATION_KEY`]). The descriptor's cost (`hits_addend`) is its estimate.
//! - [`RESERVE_KEY`]`=`[`FALLBACK`]: the same entries without an estimate. Envoy sends no
//!   descriptor whose `hits_addend` does not resolve (a request without the header its estimate
//!   comes from), so a route that reserves sends this one beside it: dropped (answered OK) when
//!   the estimate's descriptor came, else charged the domain's `reservations.default_estimate`,
//!   or, when the domain has none, refused (OVER_LIMIT, nothing charged).
//! - [`SETTLE_KEY`]`=<id>`: settles the reservation the id names on the counters the rest of
//!   the descriptor reaches, its cost the actual use; answered OK with no limit. A settle of
//!   an id already settled, or never issued, changes nothing.

use crate::algorithm::concurrency::SlotId;
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::RateLimitRequest;
use crate::service::slots::{parse_id, IdError, RELEASE_KEY};

/// The descriptor entry that makes the request a reservation.
pub const RESERVE_KEY: &str = "tollgate.reserve";

/// The value of a [`RESERVE_KEY`] entry standing for a missing estimate.
pub const FALLBACK: &str = "fallback";

/// The descriptor entry that settles the reservation its value names.
pub const SETTLE_KEY: &str = "tollgate.settle";

/// The dynamic metadata field holding a reservation's id.
pub const RESERVATION_KEY: &str = "tollgate.reservation";

/// A request whose descriptors say more than what to decide.
#[derive(Debug, Default, PartialEq)]
pub struct Marked {
    /// A release: the id and its descriptors, release entry taken off.
    pub release: Option<(SlotId, Vec<RateLimitDescriptor>)>,
    /// A settle: the id and its descriptors, settle entry taken off.
    pub settle: Option<(SlotId, Vec<RateLimitDescriptor>)>,
    /// The request is a reservation.
    pub reserve: bool,
    /// What is left to decide, marks taken off (a missing estimate given the default).
    pub rest: RateLimitRequest,
    /// Where, in the request, the descriptors answered OK with no limit were (releases,
    /// settles, fallbacks whose estimate came).
    pub answered: Vec<usize>,
    /// Descriptors of `rest` that reserve without an estimate in a domain without a default:
    /// the request is refused.
    pub refused: Vec<usize>,
}

/// A descriptor's mark, if its last entry is one.
enum Mark {
    Release(SlotId),
    Settle(SlotId),
    Estimate,
    Fallback,
}

fn mark_of(d: &RateLimitDescriptor) -> Result<Option<Mark>, IdError> {
    let Some(last) = d.entries.last() else {
        return Ok(None);
    };
    Ok(Some(match last.key.as_str() {
        RELEASE_KEY => Mark::Release(parse_id(&last.value)?),
        SETTLE_KEY => Mark::Settle(parse_id(&last.value)?),
        RESERVE_KEY if last.value == FALLBACK => Mark::Fallback,
        RESERVE_KEY => Mark::Estimate,
        _ => return Ok(None),
    }))
}

/// Whether `req` has a marked descriptor at all: most requests do not, and skip [`split`].
pub fn any_marked(req: &RateLimitRequest) -> bool {
    req.descriptors.iter().any(|d| {
        d.entries
            .last()
            .is_some_and(|e| e.key.starts_with("tollgate."))
    })
}

/// Splits a request by its marks. `default_estimate` is the domain's (see the module).
pub fn split(req: &RateLimitRequest, default_estimate: Option<u64>) -> Result<Marked, IdError> {
    let marks: Vec<Option<Mark>> = req
        .descriptors
        .iter()
        .map(mark_of)
        .collect::<Result<_, _>>()?;
    let unmarked = |d: &RateLimitDescriptor| RateLimitDescriptor {
        entries: d.entries[..d.entries.len() - 1].to_vec(),
        ..d.clone()
    };
    let estimated: Vec<&[_]> = req
        .descriptors
        .iter()
        .zip(&marks)
        .filter(|(_, m)| matches!(m, Some(Mark::Estimate)))
        .map(|(d, _)| &d.entries[..d.entries.len() - 1])
        .collect();
    let mut out = Marked {
        rest: RateLimitRequest {
            domain: req.domain.clone(),
            descriptors: Vec::with_capacity(req.descriptors.len()),
            hits_addend: req.hits_addend,
        },
        ..Marked::default()
    };
    for (i, (d, mark)) in req.descriptors.iter().zip(marks).enumerate() {
        match mark {
            None => out.rest.descriptors.push(d.clone()),
            Some(Mark::Release(id)) => {
                add_to(&mut out.release, id, unmarked(d), "release")?;
                out.answered.push(i);
            }
            Some(Mark::Settle(id)) => {
                add_to(&mut out.settle, id, unmarked(d), "settle")?;
                out.answered.push(i);
            }
            Some(Mark::Estimate) => {
                out.reserve = true;
                out.rest.descriptors.push(unmarked(d));
            }
            Some(Mark::Fallback) => {
                let entries = &d.entries[..d.entries.len() - 1];
                if estimated.contains(&entries) {
                    out.answered.push(i);
                    continue;
                }
                out.reserve = true;
                let mut d = unmarked(d);
                match default_estimate {
                    Some(estimate) => d.hits_addend = Some(estimate),
                    None => out.refused.push(out.rest.descriptors.len()),
                }
                out.rest.descriptors.push(d);
            }
        }
    }
    Ok(out)
}

fn add_to(
    into: &mut Option<(SlotId, Vec<RateLimitDescriptor>)>,
    id: SlotId,
    d: RateLimitDescriptor,
    what: &'static str,
) -> Result<(), IdError> {
    match into {
        None => *into = Some((id, vec![d])),
        Some((first, ds)) if *first == id => ds.push(d),
        Some(_) => return Err(IdError::TwoIds(what)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::common::rate_limit_descriptor::Entry;

    fn d(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            hits_addend: hits,
            ..Default::default()
        }
    }

    fn req(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
        RateLimitRequest {
            domain: "llm".into(),
            descriptors,
            hits_addend: 0,
        }
    }

    const ID: &str = "00000000000010000000000002";

    #[test]
    fn an_estimate_makes_a_reservation_and_its_fallback_is_dropped() {
        let r = req(vec![
            d(&[("tenant", "a"), (RESERVE_KEY, "")], Some(500)),
            d(&[("tenant", "a"), (RESERVE_KEY, FALLBACK)], None),
            d(&[("tenant", "a")], None),
        ]);
        let m = split(&r, None).unwrap();
        assert!(m.reserve);
        assert_eq!(m.answered, [1]);
        assert!(m.refused.is_empty());
        assert_eq!(
            m.rest.descriptors,
            [
                d(&[("tenant", "a")], Some(500)),
                d(&[("tenant", "a")], None)
            ]
        );
    }

    #[test]
    fn a_missing_estimate_is_the_default_or_refused() {
        let r = req(vec![d(&[("tenant", "a"), (RESERVE_KEY, FALLBACK)], None)]);
        let m = split(&r, Some(2000)).unwrap();
        assert!(m.reserve && m.refused.is_empty());
        assert_eq!(m.rest.descriptors, [d(&[("tenant", "a")], Some(2000))]);
        let m = split(&r, None).unwrap();
        assert_eq!(m.refused, [0]);
    }

    #[test]
    fn settles_and_releases_name_one_id_each() {
        let r = req(vec![
            d(&[("tenant", "a"), (SETTLE_KEY, ID)], Some(70)),
            d(&[("model", "m"), (RELEASE_KEY, ID)], None),
        ]);
        let m = split(&r, None).unwrap();
        assert_eq!(
            m.settle,
            Some(((1, 2), vec![d(&[("tenant", "a")], Some(70))]))
        );
        assert_eq!(m.release, Some(((1, 2), vec![d(&[("model", "m")], None)])));
        assert_eq!(m.answered, [0, 1]);
        assert!(!m.reserve && m.rest.descriptors.is_empty());
        let two = req(vec![
            d(&[("tenant", "a"), (SETTLE_KEY, ID)], Some(70)),
            d(
                &[("tenant", "b"), (SETTLE_KEY, "00000000000010000000000003")],
                Some(1),
            ),
        ]);
        assert_eq!(split(&two, None), Err(IdError::TwoIds("settle")));
        let bad = req(vec![d(&[(SETTLE_KEY, "zz")], Some(1))]);
        assert!(matches!(split(&bad, None), Err(IdError::BadId(_))));
    }
}
