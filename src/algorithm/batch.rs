//! One request, all-or-nothing: every charge of a request is tried in order against the
//! running state of its counter (so two charges on one key add up), then the request's
//! [`Verdict`] decides which counters keep their new state: all, only overdraft ones, or none.
//!
//! Stores load the counters a request touches, call [`evaluate`] under their own atomicity
//! (shard locks in memory, a Lua script in Redis) and write back the counters marked `commit`.

use super::{charge, check_cost, fits, refresh, remaining, reset_after, retry_after, State};
use crate::decision::{verdict, ChargeOutcome, Verdict};
use crate::limit::LimitParams;
use crate::plan::Role;

/// One charge of a batch, pointing at its counter (an index into the batch's counters).
#[derive(Debug, Clone, Copy)]
pub struct BatchCharge {
    pub counter: usize,
    pub params: LimitParams,
    pub cost: u64,
    pub role: Role,
}

/// One distinct counter key during a batch: its state as loaded, and as it would be after.
#[derive(Debug, Clone)]
pub struct Counter {
    pub loaded: Option<State>,
    pub after: Option<State>,
    pub overdraft: bool,
    /// Set by [`evaluate`]: write `after` back to the store.
    pub commit: bool,
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
        }
    }

    /// The state the request leaves behind.
    fn final_state(&self) -> &Option<State> {
        if self.commit {
            &self.after
        } else {
            &self.loaded
        }
    }
}

/// Decides a request all-or-nothing over `counters`, marking the ones to write back. With
/// `count_rejected` every charge lands, as envoyproxy/ratelimit.
pub fn evaluate(
    counters: &mut [Counter],
    charges: &[BatchCharge],
    now: u64,
    count_rejected: bool,
) -> Vec<ChargeOutcome> {
    let mut allowed = Vec::with_capacity(charges.len());
    for c in charges {
        let counter = &mut counters[c.counter];
        let ok = fits(
            &counter.after,
            &c.params,
            check_cost(&c.params, c.cost),
            now,
        );
        if ok || c.params.overdraft || count_rejected {
            charge(&mut counter.after, &c.params, c.cost, now);
        }
        allowed.push(ok);
    }
    let verdict = verdict(
        charges
            .iter()
            .zip(&allowed)
            .map(|(c, &ok)| (c.role, c.params.overdraft, ok)),
    );
    for counter in counters.iter_mut() {
        counter.commit = count_rejected
            || match verdict {
                Verdict::Admit => true,
                Verdict::OverdraftOnly => counter.overdraft,
                Verdict::Deny => false,
            };
        counter.commit &= counter.after != counter.loaded;
    }
    charges
        .iter()
        .zip(allowed)
        .map(|(c, ok)| {
            let state = counters[c.counter].final_state();
            ChargeOutcome {
                allowed: ok,
                remaining: remaining(state, &c.params, now),
                wait_us: if ok {
                    Some(reset_after(state, &c.params, now))
                } else {
                    retry_after(state, &c.params, check_cost(&c.params, c.cost), now)
                },
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::algorithm::fixed_window::Window;
    use crate::limit::Algorithm;

    pub const S: u64 = 1_000_000;

    pub fn params(algorithm: Algorithm, limit: u64, window_s: u64) -> LimitParams {
        LimitParams {
            algorithm,
            limit,
            window_us: window_s * S,
            burst: limit,
            overdraft: false,
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
        }];
        let out = evaluate(&mut counters, &charges, now, false);
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
            })
            .collect();
        let out = evaluate(&mut counters, &charges, now, false);
        assert!(out[0].allowed && !out[1].allowed);
        assert!(!counters[0].commit && !counters[1].commit);
        assert_eq!(out[0].remaining, 1);

        let mut counters = fresh();
        let out = evaluate(&mut counters, &charges, now, true);
        assert!(out[0].allowed && !out[1].allowed);
        assert!(counters[0].commit && counters[1].commit);
    }
}
