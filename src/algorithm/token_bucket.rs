//! Token bucket in GCRA form: one theoretical arrival time (`tat`) per key.
//!
//! With emission interval `T = window / limit` (the time one unit takes to refill), a charge
//! of `c` moves `tat` to `max(tat, now) + c·T`, and `k` fits while
//! `tat + k·T - now ≤ burst·T` (burst = capacity). `tat` is held exactly as
//! `us + frac / limit` µs, so scaled by `limit` every comparison is an integer one.

use crate::limit::LimitParams;

/// The theoretical arrival time `us + frac / limit` (`frac < limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tat {
    pub us: u64,
    pub frac: u64,
}

/// A `tat` at or before now is a full bucket: nothing to keep.
pub fn is_expired(t: &Tat, now: u64) -> bool {
    t.us < now || (t.us == now && t.frac == 0)
}

/// `(tat - now) · limit`, the bucket's debt scaled to integers (0 when full).
pub fn debt(t: Option<&Tat>, p: &LimitParams, now: u64) -> u128 {
    match t {
        Some(t) if t.us >= now => (t.us - now) as u128 * p.limit as u128 + t.frac as u128,
        _ => 0,
    }
}

pub fn fits(t: Option<&Tat>, p: &LimitParams, k: u64, now: u64) -> bool {
    let w = p.window_us as u128;
    debt(t, p, now) + k as u128 * w <= p.burst as u128 * w
}

pub fn charge(t: Option<Tat>, p: &LimitParams, cost: u64, now: u64) -> Tat {
    let (us, frac) = match t {
        Some(t) if t.us >= now => (t.us, t.frac),
        _ => (now, 0),
    };
    let total = frac as u128 + cost as u128 * p.window_us as u128;
    let limit = p.limit as u128;
    Tat {
        us: us + (total / limit) as u64,
        frac: (total % limit) as u64,
    }
}

/// Whole units left in the bucket.
pub fn remaining(t: Option<&Tat>, p: &LimitParams, now: u64) -> u64 {
    let full = p.burst as u128 * p.window_us as u128;
    (full.saturating_sub(debt(t, p, now)) / p.window_us as u128) as u64
}

/// Until the bucket is full again.
pub fn reset_after(t: &Tat, p: &LimitParams, now: u64) -> u64 {
    debt(Some(t), p, now).div_ceil(p.limit as u128) as u64
}

/// The smallest `w` with `debt - w·limit + k·window ≤ burst·window`.
pub fn retry_after(t: &Tat, p: &LimitParams, k: u64, now: u64) -> u64 {
    let w = p.window_us as u128;
    let over = (debt(Some(t), p, now) + k as u128 * w).saturating_sub(p.burst as u128 * w);
    over.div_ceil(p.limit as u128) as u64
}

pub fn expires_at(t: &Tat) -> u64 {
    t.us + u64::from(t.frac > 0)
}
