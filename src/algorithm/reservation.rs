//! Reservations: a request charged up front with an *estimate* of its cost (an LLM call's
//! `max_tokens`), so concurrent requests see it at once, and *settled* later with what it
//! actually used. A reservation is an ordinary all-or-nothing charge; what makes it one is its
//! record, which keeps per counter what the estimate cost and where it landed ([`Reserved`]).
//!
//! [`settle`] turns a counter's reservation into the actual use:
//! - less used than landed: the difference is given back where the charge landed, by the
//!   algorithm's own exact refund (so only while that window, granule or bucket debt is still
//!   live: a settle after its fixed or calendar window ended, or after its sliding-window
//!   granule left the window, gives nothing back; a token bucket gives back at most what the
//!   debts charged after it allow, never more than charging the actual at reserve time would
//!   have left);
//! - more used than estimated: the excess lands now, as overdraft (past the limit if need be,
//!   up to the usage cap), in the window that holds now;
//! - anything between (a landing the usage cap cut short): nothing changes.
//!
//! Concurrency limits are never reserved (their slots are released by id instead).

use super::batch::{BatchCharge, Counter, Evaluated};
use super::concurrency::SlotId;
use super::{charge_as, refund, Landing, State};
use crate::algorithm::rule::Verdict;
use crate::limit::{Algorithm, LimitParams};

/// What a reservation left on one counter: the estimate it was charged and where it landed
/// (`landing.added` is less than `cost` when the usage cap stopped it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    pub cost: u64,
    pub landing: Landing,
}

/// Settles `reserved` on its counter with the `actual` use (see the module). `state` must be
/// refreshed. Returns where the excess landed (`added` 0: none).
pub fn settle(
    state: &mut Option<State>,
    p: &LimitParams,
    reserved: Reserved,
    actual: u64,
    now: u64,
    id: SlotId,
) -> Landing {
    let back = reserved.landing.added.saturating_sub(actual);
    if back > 0 {
        let given = Landing {
            added: back,
            mark: reserved.landing.mark,
        };
        refund(state, p, given, now);
    }
    let excess = actual.saturating_sub(reserved.cost);
    // A fair share's tenant whose window has ended is not active in the new one: its excess
    // lands on the pool only (the script does the same).
    if excess == 0 || (p.fair_floor > 0 && state.is_none()) {
        return Landing::default();
    }
    charge_as(state, p, excess, now, id)
}

/// Settles a placement group: each charge whose counter the reservation charged
/// (`reserved[i]`, as the store's record holds it) settles with the charge's cost as the
/// actual use; the others touch nothing. A charge is allowed when it settled; its landing is
/// the excess's. Every counter that changed is marked to be written back.
pub fn settle_group(
    counters: &mut [Counter],
    charges: &[BatchCharge],
    reserved: &[Option<Reserved>],
    now: u64,
) -> Evaluated {
    let mut allowed = Vec::with_capacity(charges.len());
    let mut landings = Vec::with_capacity(charges.len());
    // A counter a settle refunds on is written back as it stands now, found or not (as a
    // refund is: a key whose state has ended goes, a log loses what it forgot).
    let mut touched = vec![false; counters.len()];
    for (c, r) in charges.iter().zip(reserved) {
        let settled = match r {
            Some(r) if c.params.algorithm != Algorithm::Concurrency => {
                touched[c.counter] |= r.landing.added > c.cost;
                let counter = &mut counters[c.counter];
                Some(settle(
                    &mut counter.after,
                    &c.params,
                    *r,
                    c.cost,
                    now,
                    c.slot,
                ))
            }
            _ => None,
        };
        allowed.push(settled.is_some());
        landings.push(settled.unwrap_or_default());
    }
    for (counter, touched) in counters.iter_mut().zip(touched) {
        counter.commit = touched || counter.after != counter.loaded;
    }
    Evaluated {
        verdict: Verdict::Admit,
        allowed,
        landings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::batch::tests::{params, S};
    use crate::algorithm::{charge, fits, refresh, remaining};
    use crate::limit::Algorithm;

    fn reserve(state: &mut Option<State>, p: &LimitParams, cost: u64, now: u64) -> Reserved {
        refresh(state, p, now);
        assert!(fits(state, p, cost, now), "the estimate fits");
        Reserved {
            cost,
            landing: charge(state, p, cost, now),
        }
    }

    #[test]
    fn a_fixed_window_reservation_becomes_the_actual() {
        let p = params(Algorithm::FixedWindow, 1000, 60);
        let now = 60 * S + 5;
        let mut state = None;
        let r = reserve(&mut state, &p, 100, now);
        // 30 used: 70 back.
        let extra = settle(&mut state, &p, r, 30, now + S, (1, 1));
        assert_eq!(extra.added, 0);
        assert_eq!(remaining(&state, &p, now + S), 970);
        // 150 used of a 100 estimate: 50 more lands, past what was reserved.
        let mut state = None;
        let r = reserve(&mut state, &p, 100, now);
        let extra = settle(&mut state, &p, r, 150, now + S, (1, 1));
        assert_eq!(extra.added, 50);
        assert_eq!(remaining(&state, &p, now + S), 850);
    }

    #[test]
    fn a_settle_after_the_window_ended_gives_nothing_back_and_lands_the_excess_now() {
        let p = params(Algorithm::FixedWindow, 1000, 60);
        let now = 60 * S + 5;
        let mut state = None;
        let r = reserve(&mut state, &p, 100, now);
        let later = 120 * S + 1;
        refresh(&mut state, &p, later);
        settle(&mut state, &p, r, 10, later, (1, 1));
        assert_eq!(
            remaining(&state, &p, later),
            1000,
            "nothing of the old window comes back"
        );
        let mut state = None;
        let r = reserve(&mut state, &p, 100, now);
        refresh(&mut state, &p, later);
        let extra = settle(&mut state, &p, r, 130, later, (1, 1));
        assert_eq!(extra.added, 30);
        assert_eq!(
            remaining(&state, &p, later),
            970,
            "the excess lands in the new window"
        );
    }

    #[test]
    fn a_sliding_window_reservation_gives_back_in_its_granule() {
        let p = params(Algorithm::SlidingWindow, 1000, 60);
        let now = 60 * S + 5;
        let mut state = None;
        let r = reserve(&mut state, &p, 100, now);
        settle(&mut state, &p, r, 40, now + 10 * S, (1, 1));
        assert_eq!(remaining(&state, &p, now + 10 * S), 960);
    }

    #[test]
    fn a_token_bucket_gives_back_no_more_than_charging_the_actual_would_have_left() {
        let p = params(Algorithm::TokenBucket, 100, 60);
        let now = 1_000 * S;
        // Reserve 60 of a full bucket of 100, then a later charge of 30; settle with 20 used.
        let mut state = None;
        let r = reserve(&mut state, &p, 60, now);
        charge(&mut state, &p, 30, now);
        settle(&mut state, &p, r, 20, now, (1, 1));
        let settled = remaining(&state, &p, now);
        // Charging 20 then 30 at the same instant leaves 50.
        let mut actual = None;
        charge(&mut actual, &p, 20, now);
        charge(&mut actual, &p, 30, now);
        assert!(settled <= remaining(&actual, &p, now), "{settled}");
        // With nothing charged after it, the bucket gives all 40 back.
        let mut state = None;
        let r = reserve(&mut state, &p, 60, now);
        settle(&mut state, &p, r, 20, now, (1, 1));
        assert_eq!(remaining(&state, &p, now), 80);
    }
}
