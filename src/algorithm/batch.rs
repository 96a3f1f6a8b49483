//! One request, all-or-nothing: every charge of a request is tried in order against the
//! running state of its counter (so two charges on one key add up), then the request's
//! [`Verdict`] decides which counters keep their new state: all, only overdraft ones, or none.
//!
//! Stores load the counters a request touches, call [`evaluate`] under their own atomicity
//! (shard locks in memory, a Lua script in Redis, which follows this function step by step)
//! and write back the counters marked `commit`.
//!
//! What each charge reports follows the reporting rule of [`crate::service::decision`], from the state
//! the request leaves behind: an allowed charge, the remaining and the time until its limit is
//! whole; a denied one, the time until the request's unlanded cost on that counter fits.

use super::concurrency::{self, SlotId};
use super::fixed_window::{self, Window};
use super::{
    admits, charge_as, check_cost, refresh, remaining, reset_after, retry_after, Landing, State,
};
use crate::algorithm::rule::{verdict, ChargeOutcome, Mode, Role, Verdict};
use crate::limit::{Algorithm, LimitParams};

/// A charge in a batch (last stage, after `store::placement::PlacedCharge`): the limit's
/// numbers, pointing at its counter (an index into the batch's counters).
#[derive(Debug, Clone, Copy)]
pub struct BatchCharge {
    pub counter: usize,
    pub params: LimitParams,
    pub cost: u64,
    pub role: Role,
    /// The request's concurrency slot id (`(0, 0)` when it takes none).
    pub slot: SlotId,
    /// A class's charge (`params.borrow_until > 0`): its pool's counter, a fixed window charged
    /// in the batch. Unused otherwise.
    pub pool: usize,
}

/// One distinct counter key during a batch: its state as loaded, and as it would be after.
#[derive(Debug, Clone)]
pub struct Counter {
    pub loaded: Option<State>,
    pub after: Option<State>,
    pub overdraft: bool,
    /// Set by [`evaluate`]: write `after` back to the store.
    pub commit: bool,
    /// A fair share's tenant seen for the first time in its window, or the count of active
    /// tenants it joined: `loaded` holds the change, which is written whatever the verdict.
    pub touched: bool,
}

impl Counter {
    pub fn new(loaded: Option<State>, params: &LimitParams, now: u64) -> Counter {
        let mut loaded = loaded;
        refresh(&mut loaded, params, now);
        Counter {
            after: loaded.clone(),
            loaded,
            overdraft: params.overdraft,
            commit: false,
            touched: false,
        }
    }

    /// The state the request leaves behind.
    pub fn final_state(&self) -> &Option<State> {
        if self.commit {
            &self.after
        } else {
            &self.loaded
        }
    }
}

/// What a batch decided: the verdict, and per charge whether its limit had room and what it
/// left in its counter (`added` 0 for a charge that did not land).
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    pub verdict: Verdict,
    pub allowed: Vec<bool>,
    pub landings: Vec<Landing>,
}

/// Decides a request (or one placement group of it) all-or-nothing over `counters`, marking
/// the ones to write back. `quota_descriptors` counts the whole request's quota descriptors.
/// `mode` is `Decide`, `CountRejected` (every charge lands) or `DryRun` (nothing lands);
/// a refund is not a batch (see [`super::refund`]).
pub fn evaluate(
    counters: &mut [Counter],
    charges: &[BatchCharge],
    now: u64,
    mode: Mode,
    quota_descriptors: usize,
) -> Evaluated {
    debug_assert!(
        !matches!(mode, Mode::Refund | Mode::Unreserve | Mode::Settle),
        "a refund or a settle is not a batch (see super::refund, super::reservation)"
    );
    if matches!(mode, Mode::Release | Mode::Renew) {
        return slots(counters, charges, now, mode);
    }
    let count_rejected = mode == Mode::CountRejected;
    let mut allowed = Vec::with_capacity(charges.len());
    let mut landings = Vec::with_capacity(charges.len());
    // A class's borrow check sees its pool as the whole request would leave it.
    let mut totals = Vec::new();
    if charges.iter().any(|c| c.params.borrow_until > 0) {
        totals = vec![0u64; counters.len()];
        for c in charges {
            totals[c.counter] = totals[c.counter].saturating_add(c.cost);
        }
    }
    touch_tenants(counters, charges, now);
    for (i, c) in charges.iter().enumerate() {
        let k = check_cost(&c.params, c.cost, count_rejected);
        let p = match c.params.fair_floor {
            0 => c.params,
            _ => LimitParams {
                limit: share(counters, charges, i),
                ..c.params
            },
        };
        let ok = admits(&counters[c.counter].after, &p, k, now) || borrows(counters, &totals, c);
        let counter = &mut counters[c.counter];
        // A denied request never takes slots: nothing would release them.
        let counts = count_rejected && c.params.algorithm != Algorithm::Concurrency;
        let landing = if ok || c.params.overdraft || counts {
            charge_as(&mut counter.after, &c.params, c.cost, now, c.slot)
        } else {
            Landing::default()
        };
        allowed.push(ok);
        landings.push(landing);
    }
    let verdict = verdict(
        charges
            .iter()
            .zip(&allowed)
            .map(|(c, &ok)| (c.role, c.params.overdraft, ok)),
        quota_descriptors,
    );
    for counter in counters.iter_mut() {
        let lands = count_rejected || verdict.lands(counter.overdraft);
        if counter.touched && !lands {
            counter.after = counter.loaded.clone();
        }
        counter.commit =
            mode != Mode::DryRun && (counter.touched || (lands && counter.after != counter.loaded));
    }
    for (c, landing) in charges.iter().zip(landings.iter_mut()) {
        let counter = &counters[c.counter];
        if !counter.commit || counter.after == counter.loaded {
            *landing = Landing::default();
        }
    }
    Evaluated {
        verdict,
        allowed,
        landings,
    }
}

/// A fair share's tenant (`fair_floor > 0`) charged something and not yet active in its window
/// becomes active, whatever the verdict: its counter starts empty, and the pool's count of
/// active tenants (the counter of the charge right after it, `fair_cap > 0`, limited to the
/// most tenants it counts) adds one. A check (cost 0) makes no tenant active, nor does a
/// request once the count is full. The script does the same.
fn touch_tenants(counters: &mut [Counter], charges: &[BatchCharge], now: u64) {
    for (i, c) in charges.iter().enumerate() {
        let Some(a) = charges.get(i + 1) else {
            continue;
        };
        if c.params.fair_floor == 0
            || c.cost == 0
            || a.params.fair_cap == 0
            || c.params.algorithm != Algorithm::FixedWindow
            || a.params.algorithm != Algorithm::FixedWindow
            || counters[c.counter].after.is_some()
        {
            continue;
        }
        let w = match &counters[a.counter].after {
            Some(State::Window(w)) => *w,
            _ => Window {
                count: 0,
                end_us: fixed_window::fresh_end(&a.params, now),
            },
        };
        // Past the most tenants it counts, a new one is not counted, and nothing is written
        // for it unless its charge lands: refused newcomers leave no key behind.
        if w.count >= a.params.limit {
            continue;
        }
        let tenant = &mut counters[c.counter];
        tenant.loaded = Some(State::Window(Window {
            count: 0,
            end_us: fixed_window::fresh_end(&c.params, now),
        }));
        tenant.after = tenant.loaded.clone();
        tenant.touched = true;
        let active = &mut counters[a.counter];
        active.loaded = Some(State::Window(Window {
            count: w.count + 1,
            ..w
        }));
        active.after = active.loaded.clone();
        active.touched = true;
    }
}

/// A fair share's tenant's share (charge `i`): the pool's limit ÷ its active tenants (the
/// count the next charge's counter holds), rounded down, and no less than the floor.
pub fn share(counters: &[Counter], charges: &[BatchCharge], i: usize) -> u64 {
    let c = &charges[i];
    let active =
        charges
            .get(i + 1)
            .filter(|a| a.params.fair_cap > 0)
            .map_or(1, |a| match &counters[a.counter].after {
                Some(State::Window(w)) => w.count.max(1),
                _ => 1,
            });
    (c.params.limit / active).max(c.params.fair_floor)
}

/// Whether a class's charge past its guarantee may borrow: its pool's use, with every charge
/// the batch makes there (`totals`, per counter), is within `borrow_until`.
fn borrows(counters: &[Counter], totals: &[u64], c: &BatchCharge) -> bool {
    c.params.borrow_until > 0
        && counters.get(c.pool).is_some_and(|pool| {
            let used = fixed_window::used(match &pool.loaded {
                Some(State::Window(w)) => Some(w),
                _ => None,
            });
            used.saturating_add(totals[c.pool]) <= c.params.borrow_until
        })
}

/// A release or a renew of the slots `charge.slot` holds, on the concurrency charges (every
/// other charge is allowed and touches nothing): a concurrency charge is allowed when the id
/// held slots there, and a release's landing says what it freed.
fn slots(counters: &mut [Counter], charges: &[BatchCharge], now: u64, mode: Mode) -> Evaluated {
    let mut allowed = Vec::with_capacity(charges.len());
    let mut landings = Vec::with_capacity(charges.len());
    for c in charges {
        let counter = &mut counters[c.counter];
        let mut landing = Landing::default();
        let mut ok = true;
        if c.params.algorithm == Algorithm::Concurrency {
            let held = concurrency::held_by(
                match &counter.after {
                    Some(State::Slots(s)) => Some(s),
                    _ => None,
                },
                c.slot,
            );
            match (mode, counter.after.take()) {
                (Mode::Release, Some(State::Slots(s))) => {
                    counter.after = concurrency::release(s, c.slot, held).map(State::Slots);
                    landing = Landing {
                        added: held,
                        mark: c.slot,
                    };
                    ok = held > 0;
                }
                (_, Some(State::Slots(mut s))) => {
                    ok = concurrency::renew(&mut s, &c.params, c.slot, now);
                    counter.after = Some(State::Slots(s));
                }
                (_, other) => {
                    counter.after = other;
                    ok = false;
                }
            }
        }
        allowed.push(ok);
        landings.push(landing);
    }
    for counter in counters.iter_mut() {
        counter.commit = counter.after != counter.loaded;
    }
    Evaluated {
        verdict: Verdict::Admit,
        allowed,
        landings,
    }
}

/// What each charge reports, from the state each counter is left in (`states`, by counter
/// index): an allowed charge, the remaining and the time until its limit is whole; a denied
/// one, the time until the request's unlanded cost on that counter fits (its own check cost
/// if it landed or is an overdraft).
pub fn report(
    states: &[&Option<State>],
    charges: &[BatchCharge],
    allowed: &[bool],
    landings: &[Landing],
    now: u64,
    count_rejected: bool,
) -> Vec<ChargeOutcome> {
    let mut need = vec![0u64; states.len()];
    for (c, landing) in charges.iter().zip(landings) {
        if landing.added == 0 && !c.params.overdraft {
            need[c.counter] = need[c.counter].saturating_add(c.cost);
        }
    }
    charges
        .iter()
        .zip(allowed)
        .zip(landings)
        .map(|((c, &ok), landing)| {
            let state = states[c.counter];
            let k = check_cost(&c.params, c.cost, count_rejected);
            let k = if landing.added > 0 || c.params.overdraft {
                k
            } else {
                k.max(need[c.counter])
            };
            let wait_us = if ok {
                Some(reset_after(state, &c.params, now))
            } else if c.params.borrow_until > 0 && c.pool < states.len() {
                // A class past its guarantee fits again by borrowing, when the window ends at
                // the latest; never only past what it may borrow.
                (k <= c.params.limit.max(c.params.borrow_until))
                    .then(|| reset_after(state, &c.params, now))
            } else {
                retry_after(state, &c.params, k, now)
            };
            ChargeOutcome {
                allowed: ok,
                remaining: remaining(state, &c.params, now),
                wait_us,
            }
        })
        .collect()
}

/// [`evaluate`], then [`report`] from the states the counters are left in.
pub fn evaluate_and_report(
    counters: &mut [Counter],
    charges: &[BatchCharge],
    now: u64,
    mode: Mode,
    quota_descriptors: usize,
) -> (Evaluated, Vec<ChargeOutcome>) {
    let evaluated = evaluate(counters, charges, now, mode, quota_descriptors);
    let states: Vec<&Option<State>> = counters.iter().map(Counter::final_state).collect();
    let outcomes = report(
        &states,
        charges,
        &evaluated.allowed,
        &evaluated.landings,
        now,
        mode == Mode::CountRejected,
    );
    (evaluated, outcomes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::limit::Algorithm;

    pub const S: u64 = 1_000_000;

    pub fn params(algorithm: Algorithm, limit: u64, window_s: u64) -> LimitParams {
        LimitParams {
            algorithm,
            limit,
            window_us: window_s * S,
            burst: limit,
            overdraft: false,
            calendar: None,
            max_wait_us: 0,
            borrow_until: 0,
            fair_floor: 0,
            fair_cap: 0,
            ends_at_us: 0,
        }
    }

    /// One enforced charge against `state`, which keeps what the batch commits.
    pub fn run(state: &mut Option<State>, p: &LimitParams, cost: u64, now: u64) -> ChargeOutcome {
        let mut counters = vec![Counter::new(state.take(), p, now)];
        let charges = [BatchCharge {
            counter: 0,
            params: *p,
            cost,
            role: Role::Enforced,
            slot: (0, 0),
            pool: 0,
        }];
        let out = evaluate_and_report(&mut counters, &charges, now, Mode::Decide, 0).1;
        let counter = counters.remove(0);
        *state = if counter.commit {
            counter.after
        } else {
            counter.loaded
        };
        out[0]
    }

    #[test]
    fn a_denied_batch_charges_nothing_unless_counting_rejected() {
        let p = params(Algorithm::FixedWindow, 1, 60);
        let now = 60 * S;
        let fresh = || {
            let full = State::Window(Window {
                count: 1,
                end_us: 120 * S,
            });
            vec![
                Counter::new(None, &p, now),
                Counter::new(Some(full), &p, now),
            ]
        };
        let mut counters = fresh();
        let charges: Vec<BatchCharge> = (0..2)
            .map(|counter| BatchCharge {
                counter,
                params: p,
                cost: 1,
                role: Role::Enforced,
                slot: (0, 0),
                pool: 0,
            })
            .collect();
        let out = evaluate_and_report(&mut counters, &charges, now, Mode::Decide, 0).1;
        assert!(out[0].allowed && !out[1].allowed);
        assert!(!counters[0].commit && !counters[1].commit);
        assert_eq!(out[0].remaining, 1);

        let mut counters = fresh();
        let out = evaluate_and_report(&mut counters, &charges, now, Mode::CountRejected, 0).1;
        assert!(out[0].allowed && !out[1].allowed);
        assert!(counters[0].commit && counters[1].commit);
    }
}
