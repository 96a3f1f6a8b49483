//! What an operator sees of a counter and what a reset leaves in it: pure, so the memory
//! store and `lua/admin.lua` answer alike and the tests hold both to these functions.
//!
//! A reset must leave nothing that a charge made before it can be refunded into: a decision
//! in flight that takes back its landing (the protocol's refunds) or a lease handed back would
//! otherwise subtract from usage counted after the reset, and over-admit. Each algorithm's
//! refund finds its landing by a mark, so a reset changes what the marks point at:
//!
//! - **fixed window** (mark: the window's end): the window is kept, empty, ending 1 µs
//!   earlier, so no earlier mark finds it; each reset takes off one more µs. A charge landing
//!   in that last µs of the window starts the next window, whose end is the old mark: a
//!   refund arriving in that µs could still find it (the one gap, 1 µs per reset);
//! - **sliding window** (mark: the entry's granule): the log is emptied down to one empty
//!   entry in the granule after the newest one, so later charges land there or later and no
//!   earlier granule exists;
//! - **token bucket** (mark: `(born, seq)`) and **concurrency** (mark: the slot id): the key
//!   is deleted; the next bucket is born later, and a slot id is never reused.

use super::fixed_window::Window;
use super::sliding_window::{granule_us, Log};
use super::{refresh, remaining, reset_after, token_bucket, State};
use crate::limit::{Algorithm, LimitParams};

/// A counter as `GET /counters` reports it, in cost units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Counted in the window (a token bucket: capacity minus the tokens left; a concurrency
    /// limit: slots held).
    pub used: u64,
    /// What a check-only request would be told is left.
    pub remaining: u64,
    /// Usage beyond the limit (an overdraft's debt, or `--count-rejected`'s count).
    pub debt: u64,
    /// Until the counter is whole again: the window's end, or a full bucket.
    pub reset_after_us: u64,
}

/// The counter as it stands at `now` (`state` as stored; expired state counts as none).
pub fn usage(state: &Option<State>, p: &LimitParams, now: u64) -> Usage {
    let mut state = state.clone();
    refresh(&mut state, p, now);
    let (used, debt) = match &state {
        None => (0, 0),
        Some(State::Window(w)) => (w.count, w.count.saturating_sub(p.limit)),
        Some(State::Log(l)) => (l.total, l.total.saturating_sub(p.limit)),
        Some(State::Slots(s)) => {
            let held = super::concurrency::used(Some(s));
            (held, held.saturating_sub(p.limit))
        }
        Some(State::Tat(t)) => {
            let units = token_bucket::debt(Some(t), p, now).div_ceil(u128::from(p.window_us));
            let units = u64::try_from(units).unwrap_or(u64::MAX);
            (units, units.saturating_sub(p.burst))
        }
    };
    Usage {
        used,
        remaining: remaining(&state, p, now),
        debt,
        reset_after_us: reset_after(&state, p, now),
    }
}

/// What a reset leaves in a counter (see the module doc); `None`: delete the key.
pub fn reset(state: &Option<State>, p: &LimitParams, now: u64) -> Option<State> {
    let mut state = state.clone();
    refresh(&mut state, p, now);
    match (p.algorithm, state?) {
        (Algorithm::FixedWindow, State::Window(w)) => {
            (w.end_us.saturating_sub(1) > now).then(|| {
                State::Window(Window {
                    count: 0,
                    end_us: w.end_us - 1,
                })
            })
        }
        (Algorithm::SlidingWindow, State::Log(l)) => {
            let g = granule_us(p.window_us);
            let newest = l.entries.back().map_or(now, |&(t, _)| t.max(now));
            let fence = (newest / g + 1) * g + g - 1;
            Some(State::Log(Log {
                entries: [(fence, 0)].into(),
                total: 0,
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::tests::{params, run};
    use super::super::{refund, Landing};
    use super::*;

    #[test]
    fn a_reset_window_counts_afresh_and_refuses_earlier_refunds() {
        let p = params(Algorithm::FixedWindow, 10, 60);
        let mut s = None;
        let now = 61_000_000;
        run(&mut s, &p, 7, now);
        let before = match &s {
            Some(State::Window(w)) => *w,
            _ => unreachable!(),
        };
        let mut after = reset(&s, &p, now + 1);
        assert_eq!(usage(&after, &p, now + 1).used, 0);
        assert_eq!(usage(&after, &p, now + 1).remaining, 10);
        // A charge after the reset, then the refund of the one before it: nothing comes off.
        run(&mut after, &p, 4, now + 2);
        refund(
            &mut after,
            &p,
            Landing {
                added: 7,
                mark: (before.end_us, 0),
            },
            now + 3,
        );
        assert_eq!(usage(&after, &p, now + 3).used, 4);
    }

    #[test]
    fn a_reset_log_lands_later_charges_past_every_earlier_granule() {
        let p = params(Algorithm::SlidingWindow, 10, 60);
        let mut s = None;
        let now = 61_000_000;
        run(&mut s, &p, 6, now);
        let granule = now / granule_us(p.window_us);
        let mut after = reset(&s, &p, now);
        assert_eq!(usage(&after, &p, now).used, 0);
        run(&mut after, &p, 3, now);
        refund(
            &mut after,
            &p,
            Landing {
                added: 6,
                mark: (granule, 0),
            },
            now,
        );
        assert_eq!(usage(&after, &p, now).used, 3);
        assert_eq!(usage(&after, &p, now).remaining, 7);
    }

    #[test]
    fn buckets_and_slots_are_deleted_and_overdraft_debt_is_reported() {
        let mut p = params(Algorithm::TokenBucket, 10, 10);
        p.overdraft = true;
        let mut s = None;
        run(&mut s, &p, 14, 5_000_000);
        let u = usage(&s, &p, 5_000_000);
        assert_eq!((u.used, u.remaining, u.debt), (14, 0, 4));
        assert_eq!(u.reset_after_us, 14_000_000);
        assert_eq!(reset(&s, &p, 5_000_000), None);
        let mut p = params(Algorithm::FixedWindow, 10, 60);
        p.overdraft = true;
        let mut s = None;
        run(&mut s, &p, 13, 1_000_000);
        assert_eq!(usage(&s, &p, 1_000_000).debt, 3);
        // Nothing live: nothing to keep.
        assert_eq!(reset(&None, &p, 1_000_000), None);
    }
}
