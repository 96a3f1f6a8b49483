//! Token bucket in GCRA form: one theoretical arrival time (`tat`) per key.
//!
//! With emission interval `T = window / limit` (the time one unit takes to refill), a charge
//! of `c` moves `tat` to `max(tat, now) + c·T`, and `k` fits while
//! `tat + k·T - now ≤ burst·T` (burst = capacity). `tat` is held exactly as
//! `us + frac / limit` µs; here every quantity is scaled by `limit` ("scaled" = µs × limit),
//! so all comparisons are exact integer ones.
//!
//! **Exact refunds.** Removing an earlier charge `c` from a bucket that others charged since
//! refunds `min(c·T, smallest debt any later charge found)`: a later charge that found less
//! debt than `c·T` would have found the bucket full without `c`, and GCRA's `max(tat, now)`
//! forgets what lies below. So the state keeps, per run (from an empty bucket, `born`), a
//! sequence number and the debts later charges found, as a short monotone stack (only debts
//! smaller than every later one can be that minimum). A refund older than what the stack
//! still covers gives nothing back: under-admitting, never over-admitting.

use crate::limit::LimitParams;

/// How many candidate debts the state keeps for exact refunds.
pub const HISTORY: usize = 8;

/// The theoretical arrival time `us + frac / limit` (`frac < limit`), and what exact refunds
/// need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tat {
    pub us: u64,
    pub frac: u64,
    /// The `now` at which this run started from a full bucket.
    pub born: u64,
    /// Charges in this run.
    pub seq: u64,
    /// Charges up to this sequence number are no longer covered by `history`.
    pub dropped: u64,
    /// `(seq, debt that charge found, scaled)`, debts increasing front to back.
    pub history: Vec<(u64, u128)>,
}

fn scaled(t: &Tat, p: &LimitParams) -> u128 {
    t.us as u128 * p.limit as u128 + t.frac as u128
}

fn now_scaled(p: &LimitParams, now: u64) -> u128 {
    now as u128 * p.limit as u128
}

/// A `tat` at or before now is a full bucket: nothing to keep.
pub fn is_expired(t: &Tat, now: u64) -> bool {
    t.us < now || (t.us == now && t.frac == 0)
}

/// `(tat - now)`, scaled: the bucket's debt (0 when full).
pub fn debt(t: Option<&Tat>, p: &LimitParams, now: u64) -> u128 {
    t.map_or(0, |t| scaled(t, p).saturating_sub(now_scaled(p, now)))
}

/// Whole units the debt stands for, rounded up.
fn units(debt: u128, p: &LimitParams) -> u128 {
    debt.div_ceil(p.window_us as u128)
}

pub fn fits(t: Option<&Tat>, p: &LimitParams, k: u64, now: u64) -> bool {
    let w = p.window_us as u128;
    debt(t, p, now) + k as u128 * w <= p.burst as u128 * w
}

/// Whether `k` fits within `wait` µs from now: it would fit at `now + wait` had nothing else
/// been charged meanwhile (`max_wait`). Never more than the burst: that never fits.
pub fn fits_within(t: Option<&Tat>, p: &LimitParams, k: u64, now: u64, wait: u64) -> bool {
    let w = p.window_us as u128;
    k <= p.burst
        && debt(t, p, now) + k as u128 * w <= p.burst as u128 * w + wait as u128 * p.limit as u128
}

/// How long an admitted charge is held, from what the bucket reported for it (`reset`: the
/// time until it is full again, rounded up): until the bucket's debt is back within its burst,
/// when the charge would have fit. Rounded so that a hold ends no sooner than that.
pub fn hold_us(p: &LimitParams, reset: u64) -> u64 {
    let burst_period = p.burst as u128 * p.window_us as u128 / p.limit.max(1) as u128;
    (reset as u128).saturating_sub(burst_period) as u64
}

/// Adds up to `cost`, stopping at the usage cap; returns the new state (`None` if it stays
/// full), what was added and the refund mark `(born, seq)`.
pub fn charge(
    t: Option<Tat>,
    p: &LimitParams,
    cost: u64,
    now: u64,
) -> (Option<Tat>, u64, (u64, u64)) {
    let found = debt(t.as_ref(), p, now);
    let room = (p.usage_cap() as u128).saturating_sub(units(found, p));
    let added = (cost as u128).min(room) as u64;
    let mut t = match t {
        Some(t) => t,
        None if added == 0 => return (None, 0, (now, 0)),
        None => Tat {
            us: now,
            frac: 0,
            born: now,
            seq: 0,
            dropped: 0,
            history: Vec::new(),
        },
    };
    if added == 0 {
        let mark = (t.born, t.seq);
        return (Some(t), 0, mark);
    }
    let tat = now_scaled(p, now) + found + added as u128 * p.window_us as u128;
    let limit = p.limit as u128;
    t.us = (tat / limit) as u64;
    t.frac = (tat % limit) as u64;
    t.seq += 1;
    while t.history.last().is_some_and(|&(_, d)| d >= found) {
        t.history.pop();
    }
    t.history.push((t.seq, found));
    if t.history.len() > HISTORY {
        t.dropped = t.history.remove(0).0;
    }
    let mark = (t.born, t.seq);
    (Some(t), added, mark)
}

/// Removes the charge of `amount` marked `(born, seq)` as exactly as the history allows;
/// `None` when the bucket is full again.
pub fn refund(
    mut t: Tat,
    p: &LimitParams,
    (born, seq): (u64, u64),
    amount: u64,
    now: u64,
) -> Option<Tat> {
    if t.born != born || t.dropped > seq {
        return Some(t);
    }
    let charged = amount as u128 * p.window_us as u128;
    let give = t
        .history
        .iter()
        .find(|&&(s, _)| s > seq)
        .map_or(charged, |&(_, d)| d.min(charged));
    let tat = scaled(&t, p) - give.min(scaled(&t, p));
    if tat <= now_scaled(p, now) {
        return None;
    }
    let limit = p.limit as u128;
    t.us = (tat / limit) as u64;
    t.frac = (tat % limit) as u64;
    // Later charges found at most `charged` less debt without this one; recording them as
    // finding `charged` less can only make later refunds smaller.
    for (s, d) in t.history.iter_mut() {
        if *s > seq {
            *d = d.saturating_sub(charged);
        }
    }
    Some(t)
}

/// Whole units left in the bucket.
pub fn remaining(t: Option<&Tat>, p: &LimitParams, now: u64) -> u64 {
    (p.burst as u128).saturating_sub(units(debt(t, p, now), p)) as u64
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
