//! The rate-limit arithmetic, pure and store-agnostic.
//!
//! Each algorithm is a small state plus a few questions — does cost `k` fit now, charge `c`,
//! what remains, when is it whole again, when does `k` fit — answered from
//! `(state, params, now)` alone: [`fixed_window`], [`sliding_window`], [`token_bucket`].
//! This module dispatches on the limit's algorithm; [`batch`] decides a whole request
//! all-or-nothing over the counters it touches. The memory store calls these functions under
//! its shard locks; the Redis scripts in `lua/` implement the same rules, and the behaviour
//! tests hold both to them.
//!
//! Times are microseconds since the Unix epoch. All arithmetic is in integers, so both stores
//! agree exactly (Lua holds integers below 2^53 exactly; config validation keeps token bucket
//! products below that).

pub mod batch;
pub mod concurrency;
pub mod fixed_window;
pub mod global;
pub mod inspect;
pub mod reservation;
pub mod rule;
pub mod sliding_window;
pub mod token_bucket;

use concurrency::{SlotId, Slots};
use fixed_window::Window;
use sliding_window::Log;
use token_bucket::Tat;

use crate::limit::{Algorithm, LimitParams};

/// Stored state of one counter key; its variant always matches the limit's algorithm.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Window(Window),
    Log(Log),
    Tat(Tat),
    Slots(Slots),
}

/// The cost a check must fit: overdraft limits only ask "is anything left?", and a cost of 0
/// (check only) asks the same, so it is OVER_LIMIT exactly when nothing is left. With
/// `count_rejected` (envoyproxy/ratelimit's counting) a check-only cost fits while usage has
/// not gone past the limit, as there.
pub fn check_cost(p: &LimitParams, cost: u64, count_rejected: bool) -> u64 {
    match (p.overdraft, cost, count_rejected) {
        (true, _, _) => 1,
        (false, 0, true) => 0,
        (false, c, _) => c.max(1),
    }
}

/// What a charge added to its counter, and how a refund finds it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Landing {
    /// Cost units added (less than the cost when the usage cap stopped it).
    pub added: u64,
    /// Fixed window: its end; sliding window: the entry's granule; token bucket: `(born, seq)`.
    pub mark: (u64, u64),
}

/// Drops what has expired, so every other function sees only live state.
pub fn refresh(state: &mut Option<State>, p: &LimitParams, now: u64) {
    let expired = match state {
        None => false,
        Some(State::Window(w)) => fixed_window::is_expired(w, now),
        Some(State::Log(log)) => sliding_window::forget_expired(log, p, now),
        Some(State::Tat(t)) => token_bucket::is_expired(t, now),
        Some(State::Slots(s)) => concurrency::forget_expired(s, now),
    };
    if expired {
        *state = None;
    }
}

fn window(state: &Option<State>) -> Option<&Window> {
    match state {
        Some(State::Window(w)) => Some(w),
        _ => None,
    }
}

fn log(state: &Option<State>) -> Option<&Log> {
    match state {
        Some(State::Log(l)) => Some(l),
        _ => None,
    }
}

fn slots(state: &Option<State>) -> Option<&Slots> {
    match state {
        Some(State::Slots(s)) => Some(s),
        _ => None,
    }
}

fn tat(state: &Option<State>) -> Option<&Tat> {
    match state {
        Some(State::Tat(t)) => Some(t),
        _ => None,
    }
}

/// Fixed and sliding window usage, and slots held, in cost units.
fn used(state: &Option<State>, p: &LimitParams) -> u64 {
    match p.algorithm {
        Algorithm::FixedWindow => fixed_window::used(window(state)),
        Algorithm::SlidingWindow => sliding_window::used(log(state)),
        Algorithm::TokenBucket => 0,
        Algorithm::Concurrency => concurrency::used(slots(state)),
    }
}

/// Whether `k` more fits now. `state` must be refreshed.
pub fn fits(state: &Option<State>, p: &LimitParams, k: u64, now: u64) -> bool {
    match p.algorithm {
        Algorithm::TokenBucket => token_bucket::fits(tat(state), p, k, now),
        _ => used(state, p) as u128 + k as u128 <= p.limit as u128,
    }
}

/// The decision's question: whether `k` fits now or, on a token bucket with `max_wait_us`,
/// within that wait (the request is then admitted now and held, see
/// [`token_bucket::hold_us`]). What a denied charge reports still says when it fits without
/// waiting. `state` must be refreshed.
pub fn admits(state: &Option<State>, p: &LimitParams, k: u64, now: u64) -> bool {
    match p.algorithm {
        Algorithm::TokenBucket if p.max_wait_us > 0 => {
            token_bucket::fits_within(tat(state), p, k, now, p.max_wait_us)
        }
        _ => fits(state, p, k, now),
    }
}

/// Adds `cost` to the state, up to the usage cap. `state` must be refreshed.
pub fn charge(state: &mut Option<State>, p: &LimitParams, cost: u64, now: u64) -> Landing {
    charge_as(state, p, cost, now, (0, 0))
}

/// [`charge`] for the request whose concurrency slots are named `slot`.
pub fn charge_as(
    state: &mut Option<State>,
    p: &LimitParams,
    cost: u64,
    now: u64,
    slot: SlotId,
) -> Landing {
    if cost == 0 {
        return Landing::default();
    }
    let old = state.take();
    let (new, added, mark) = match p.algorithm {
        Algorithm::FixedWindow => {
            let w = old.and_then(|s| match s {
                State::Window(w) => Some(w),
                _ => None,
            });
            let (w, added, end) = fixed_window::charge(w, p, cost, now);
            ((w.count > 0).then_some(State::Window(w)), added, (end, 0))
        }
        Algorithm::SlidingWindow => {
            let log = old.and_then(|s| match s {
                State::Log(l) => Some(l),
                _ => None,
            });
            let (log, added, granule) = sliding_window::charge(log, p, cost, now);
            (log.map(State::Log), added, (granule, 0))
        }
        Algorithm::TokenBucket => {
            let t = old.and_then(|s| match s {
                State::Tat(t) => Some(t),
                _ => None,
            });
            let (t, added, mark) = token_bucket::charge(t, p, cost, now);
            (t.map(State::Tat), added, mark)
        }
        Algorithm::Concurrency => {
            let s = old.and_then(|s| match s {
                State::Slots(s) => Some(s),
                _ => None,
            });
            let (s, added, mark) = concurrency::charge(s, p, cost, now, slot);
            (Some(State::Slots(s)), added, mark)
        }
    };
    *state = new;
    Landing { added, mark }
}

/// Refunds a charge that landed as `landing`, exactly, whatever else was charged since
/// (see each algorithm for how). `state` must be refreshed.
pub fn refund(state: &mut Option<State>, p: &LimitParams, landing: Landing, now: u64) {
    if landing.added == 0 {
        return;
    }
    *state = match state.take() {
        None => None,
        // A tenant of a fair share stays active to its window's end, refunded or not.
        Some(State::Window(w)) => fixed_window::refund(w, landing.mark.0, landing.added)
            .or((p.fair_floor > 0).then_some(Window { count: 0, ..w }))
            .map(State::Window),
        Some(State::Log(l)) => {
            sliding_window::refund(l, p, landing.mark.0, landing.added).map(State::Log)
        }
        Some(State::Tat(t)) => {
            token_bucket::refund(t, p, landing.mark, landing.added, now).map(State::Tat)
        }
        Some(State::Slots(s)) => {
            concurrency::release(s, landing.mark, landing.added).map(State::Slots)
        }
    };
}

/// What is left now, in whole cost units.
pub fn remaining(state: &Option<State>, p: &LimitParams, now: u64) -> u64 {
    match p.algorithm {
        Algorithm::TokenBucket => token_bucket::remaining(tat(state), p, now),
        _ => p.limit.saturating_sub(used(state, p)),
    }
}

/// Time until the limit is whole again (nothing used).
pub fn reset_after(state: &Option<State>, p: &LimitParams, now: u64) -> u64 {
    match (p.algorithm, state) {
        (Algorithm::FixedWindow, _) => fixed_window::reset_after(window(state), p, now),
        (_, None) => 0,
        (_, Some(State::Log(l))) => sliding_window::reset_after(l, p, now),
        (_, Some(State::Tat(t))) => token_bucket::reset_after(t, p, now),
        (_, Some(State::Slots(s))) => concurrency::reset_after(s, now),
        (_, Some(State::Window(w))) => fixed_window::reset_after(Some(w), p, now),
    }
}

/// Time until `k` fits, or `None` when it never can (more than the limit's capacity).
pub fn retry_after(state: &Option<State>, p: &LimitParams, k: u64, now: u64) -> Option<u64> {
    if k > p.capacity() {
        return None;
    }
    if fits(state, p, k, now) {
        return Some(0);
    }
    Some(match state {
        None => 0,
        Some(State::Window(w)) => fixed_window::retry_after(w, now),
        Some(State::Log(l)) => sliding_window::retry_after(l, p, k, now),
        Some(State::Tat(t)) => token_bucket::retry_after(t, p, k, now),
        Some(State::Slots(s)) => concurrency::retry_after(s, p, k, now),
    })
}

/// When the stored state stops mattering and may be dropped (its TTL).
pub fn expires_at(state: &State, p: &LimitParams) -> u64 {
    match state {
        State::Window(w) => fixed_window::expires_at(w),
        State::Log(l) => sliding_window::expires_at(l, p),
        State::Tat(t) => token_bucket::expires_at(t),
        State::Slots(s) => concurrency::expires_at(s),
    }
}

#[cfg(test)]
mod tests {
    use super::batch::tests::{params, run, S};
    use super::*;

    #[test]
    fn fixed_window_is_epoch_aligned() {
        let p = params(Algorithm::FixedWindow, 2, 60);
        let mut st = None;
        let t0 = 1_000 * 60 * S + 15 * S;
        let a = run(&mut st, &p, 1, t0);
        assert_eq!((a.allowed, a.remaining, a.wait_us), (true, 1, Some(45 * S)));
        assert!(run(&mut st, &p, 1, t0).allowed);
        let d = run(&mut st, &p, 1, t0 + S);
        assert_eq!(
            (d.allowed, d.remaining, d.wait_us),
            (false, 0, Some(44 * S))
        );
        assert!(run(&mut st, &p, 1, t0 + 45 * S).allowed);
    }

    #[test]
    fn sliding_window_has_no_boundary_burst() {
        let p = params(Algorithm::SlidingWindow, 10, 60);
        let mut st = None;
        let t0 = 1_000 * 60 * S + 50 * S;
        assert!(run(&mut st, &p, 10, t0).allowed);
        // A fixed window would reset at t0 + 10 s; the sliding one waits for the charge to age
        // out: it is stamped with its 60 ms granule's last µs, t0 + 39_999 µs.
        let d = run(&mut st, &p, 1, t0 + 11 * S);
        assert_eq!((d.allowed, d.wait_us), (false, Some(49 * S + 39_999)));
        assert!(!run(&mut st, &p, 1, t0 + 60 * S + 39_998).allowed);
        assert!(run(&mut st, &p, 1, t0 + 60 * S + 39_999).allowed);
    }

    #[test]
    fn sliding_window_retry_waits_for_enough_usage_to_leave() {
        let p = params(Algorithm::SlidingWindow, 10, 10);
        let mut st = None;
        let t0 = 100 * S;
        assert!(run(&mut st, &p, 3, t0).allowed);
        assert!(run(&mut st, &p, 3, t0 + S).allowed);
        assert!(run(&mut st, &p, 4, t0 + 2 * S).allowed);
        // Needs 5: the first (3) and second (3) charges must leave; each is stamped with its
        // 10 ms granule's last µs.
        let d = run(&mut st, &p, 5, t0 + 3 * S);
        assert_eq!((d.allowed, d.wait_us), (false, Some(8 * S + 9_999)));
    }

    #[test]
    fn token_bucket_refills_continuously() {
        let p = LimitParams {
            burst: 5,
            ..params(Algorithm::TokenBucket, 10, 10)
        };
        let mut st = None;
        let t0 = 100 * S;
        let first = run(&mut st, &p, 5, t0);
        assert_eq!((first.allowed, first.remaining), (true, 0));
        let d = run(&mut st, &p, 2, t0);
        assert_eq!((d.allowed, d.wait_us), (false, Some(2 * S)));
        assert!(run(&mut st, &p, 2, t0 + 2 * S).allowed);
        // A cost above the burst can never succeed.
        assert_eq!(run(&mut st, &p, 6, t0 + 100 * S).wait_us, None);
    }

    #[test]
    fn check_only_is_over_exactly_when_nothing_is_left() {
        for alg in [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::TokenBucket,
        ] {
            let p = params(alg, 2, 60);
            let mut st = None;
            let t0 = 120 * S;
            assert!(run(&mut st, &p, 0, t0).allowed, "{alg:?}");
            assert!(run(&mut st, &p, 2, t0).allowed, "{alg:?}");
            let d = run(&mut st, &p, 0, t0);
            assert!(!d.allowed, "{alg:?}");
            assert_eq!(d.remaining, 0);
        }
    }

    #[test]
    fn overdraft_charges_land_and_deny_until_repaid() {
        let p = LimitParams {
            overdraft: true,
            ..params(Algorithm::FixedWindow, 100, 60)
        };
        let mut st = None;
        let t0 = 60 * S;
        assert!(run(&mut st, &p, 250, t0).allowed);
        let d = run(&mut st, &p, 10, t0 + S);
        assert!(!d.allowed);
        assert_eq!(
            st,
            Some(State::Window(fixed_window::Window {
                count: 260,
                end_us: 120 * S
            }))
        );
    }
}
