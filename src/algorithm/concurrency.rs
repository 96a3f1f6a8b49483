//! Concurrency: a cap on requests in flight (`algorithm: concurrency`). The limit is the number
//! of slots that may be held at once; a request's cost is the slots it takes. A request that is
//! OK as a whole takes its slots under one id (the request's), each held for its hold,
//! `window_us` (the config's `lease_ttl`), after which it frees itself, so a caller that dies cannot leak
//! capacity. A release names the id: one never taken, already released or expired frees
//! nothing. A renew moves the hold's end to now + `lease_ttl`. (A *lease*,
//! in tollgate, is the Redis store's: units of a shared limit an instance takes ahead.)
//!
//! A charge's refund mark is its id, so the take-back of a request that was denied as a whole
//! is a release of what it took. The state is the slots held, in the order taken; the Redis
//! script keeps the same entries, `<id hi, id lo, units, expires>` each.

use crate::limit::LimitParams;

/// A slot id: two integers below 2^52 (the Redis script holds numbers as doubles).
pub type SlotId = (u64, u64);

/// The slots one id holds on one counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub id: SlotId,
    pub units: u64,
    pub expires_us: u64,
}

/// The slots held on one counter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Slots {
    pub held: Vec<Held>,
}

/// Drops the holds that have ended; true when none is left.
pub fn forget_expired(s: &mut Slots, now: u64) -> bool {
    s.held.retain(|h| h.expires_us > now);
    s.held.is_empty()
}

/// Slots held now.
pub fn used(s: Option<&Slots>) -> u64 {
    s.map_or(0, |s| {
        s.held.iter().fold(0u64, |n, h| n.saturating_add(h.units))
    })
}

/// Takes `cost` slots for `id` until now + the hold (an id already holding some here takes
/// more, and all of them renew). The mark is the id.
pub fn charge(
    s: Option<Slots>,
    p: &LimitParams,
    cost: u64,
    now: u64,
    id: SlotId,
) -> (Slots, u64, SlotId) {
    let mut s = s.unwrap_or_default();
    let expires_us = now + p.window_us;
    match s.held.iter_mut().find(|h| h.id == id) {
        Some(h) => {
            h.units += cost;
            h.expires_us = expires_us;
        }
        None => s.held.push(Held {
            id,
            units: cost,
            expires_us,
        }),
    }
    (s, cost, id)
}

/// Frees up to `amount` of the slots `id` holds; `None` when nothing is left held.
pub fn release(mut s: Slots, id: SlotId, amount: u64) -> Option<Slots> {
    if let Some(i) = s.held.iter().position(|h| h.id == id) {
        let h = &mut s.held[i];
        h.units -= amount.min(h.units);
        if h.units == 0 {
            s.held.remove(i);
        }
    }
    (!s.held.is_empty()).then_some(s)
}

/// What `id` holds here (0: nothing).
pub fn held_by(s: Option<&Slots>, id: SlotId) -> u64 {
    s.and_then(|s| s.held.iter().find(|h| h.id == id))
        .map_or(0, |h| h.units)
}

/// Moves the hold of what `id` holds to now + the hold; false when it holds nothing.
pub fn renew(s: &mut Slots, p: &LimitParams, id: SlotId, now: u64) -> bool {
    match s.held.iter_mut().find(|h| h.id == id) {
        Some(h) => {
            h.expires_us = now + p.window_us;
            true
        }
        None => false,
    }
}

/// Until every hold has ended (nothing held).
pub fn reset_after(s: &Slots, now: u64) -> u64 {
    expires_at(s).saturating_sub(now)
}

/// Until enough holds end for `k` more to fit (a release may free them sooner).
pub fn retry_after(s: &Slots, p: &LimitParams, k: u64, now: u64) -> u64 {
    let need = used(Some(s)).saturating_add(k).saturating_sub(p.limit);
    let mut ends: Vec<(u64, u64)> = s.held.iter().map(|h| (h.expires_us, h.units)).collect();
    ends.sort_unstable();
    let mut freed = 0u64;
    for (end, units) in ends {
        freed = freed.saturating_add(units);
        if freed >= need {
            return end.saturating_sub(now);
        }
    }
    0
}

/// When the last hold ends.
pub fn expires_at(s: &Slots) -> u64 {
    s.held.iter().map(|h| h.expires_us).max().unwrap_or(0)
}
