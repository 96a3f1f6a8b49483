//! The rate-limit arithmetic, pure and store-agnostic.
//!
//! Each algorithm is a small state plus three questions — does cost `k` fit now, charge `c`,
//! and what remains / when does it reset — answered from `(state, params, now)` alone.
//! [`decide_batch`] then decides a whole request all-or-nothing over a set of slots (one per
//! distinct counter key). The memory store calls these functions under its shard locks; the
//! Redis Lua scripts implement the same rules, and one conformance table holds both to them.
//!
//! Times are microseconds since the Unix epoch. All arithmetic is in integers, so both stores
//! agree exactly (Lua holds integers below 2^53 exactly; config validation keeps token bucket
//! products below that).
//!
//! - fixed window: `count` in the epoch-aligned window ending at `end`;
//! - sliding window: a log of `(time, cost)` charges within the trailing window; charges in
//!   one granule (`window / 1000`, at least 1 ms, epoch-aligned) share an entry stamped with
//!   the latest. Merging moves usage *later*, by less than a granule, so the count can only
//!   overstate what the trailing window holds: never over-admits;
//! - token bucket (GCRA): `tat`, the theoretical arrival time, held exactly as
//!   `us + frac / limit` µs. With emission interval `T = window / limit`, a charge of `c`
//!   moves `tat` to `max(tat, now) + c·T`, and `k` fits while `tat + k·T - now ≤ burst·T`.
//!   Scaled by `limit`, every comparison is an integer one.

use std::collections::VecDeque;

use crate::limit::{Algorithm, LimitParams};

/// Stored state of one counter key.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Window {
        count: u64,
        end_us: u64,
    },
    Log {
        entries: VecDeque<(u64, u64)>,
        total: u64,
    },
    /// Theoretical arrival time `us + frac / limit` (`frac < limit`).
    Tat {
        us: u64,
        frac: u64,
    },
}

/// Smallest distance between two separately stored sliding-window charges.
pub fn granule_us(window_us: u64) -> u64 {
    (window_us / 1_000).max(1_000)
}

/// Drops what has expired, so every other function sees only live state.
pub fn refresh(state: &mut Option<State>, p: &LimitParams, now: u64) {
    let expired = match state {
        None => false,
        Some(State::Window { end_us, .. }) => *end_us <= now,
        Some(State::Log { entries, total }) => {
            while let Some(&(t, c)) = entries.front() {
                if t + p.window_us > now {
                    break;
                }
                entries.pop_front();
                *total -= c;
            }
            entries.is_empty()
        }
        Some(State::Tat { us, frac }) => *us < now || (*us == now && *frac == 0),
    };
    if expired {
        *state = None;
    }
}

/// Token bucket: `(tat - now) · limit`, the bucket's debt scaled to integers (0 when full).
fn debt(state: &Option<State>, p: &LimitParams, now: u64) -> u128 {
    match state {
        Some(State::Tat { us, frac }) if *us >= now => {
            (*us - now) as u128 * p.limit as u128 + *frac as u128
        }
        _ => 0,
    }
}

/// Fixed and sliding window usage, in cost units.
fn used(state: &Option<State>) -> u64 {
    match state {
        Some(State::Window { count, .. }) => *count,
        Some(State::Log { total, .. }) => *total,
        _ => 0,
    }
}

/// The cost a check must fit: overdraft limits only ask "is anything left?", and a cost of 0
/// (check only) asks the same, so it is OVER_LIMIT exactly when nothing is left.
pub fn check_cost(p: &LimitParams, cost: u64) -> u64 {
    if p.overdraft {
        1
    } else {
        cost.max(1)
    }
}

/// Whether `k` more fits now. `state` must be refreshed.
pub fn fits(state: &Option<State>, p: &LimitParams, k: u64, now: u64) -> bool {
    match p.algorithm {
        Algorithm::TokenBucket => {
            let w = p.window_us as u128;
            debt(state, p, now) + k as u128 * w <= p.burst as u128 * w
        }
        _ => used(state) as u128 + k as u128 <= p.limit as u128,
    }
}

/// Adds `cost` to the state. `state` must be refreshed.
pub fn charge(state: &mut Option<State>, p: &LimitParams, cost: u64, now: u64) {
    if cost == 0 {
        return;
    }
    match p.algorithm {
        Algorithm::FixedWindow => match state {
            Some(State::Window { count, .. }) => *count += cost,
            _ => {
                *state = Some(State::Window {
                    count: cost,
                    end_us: now - now % p.window_us + p.window_us,
                })
            }
        },
        Algorithm::SlidingWindow => match state {
            Some(State::Log { entries, total }) => {
                *total += cost;
                // Charges in one granule-aligned bucket share an entry stamped with the latest,
                // so a merged entry outlives its charges by less than one granule.
                let g = granule_us(p.window_us);
                match entries.back_mut() {
                    Some(last) if now / g == last.0 / g => {
                        last.0 = last.0.max(now);
                        last.1 += cost;
                    }
                    _ => entries.push_back((now, cost)),
                }
            }
            _ => {
                *state = Some(State::Log {
                    entries: VecDeque::from([(now, cost)]),
                    total: cost,
                })
            }
        },
        Algorithm::TokenBucket => {
            let (us, frac) = match state {
                Some(State::Tat { us, frac }) if *us >= now => (*us, *frac),
                _ => (now, 0),
            };
            let total = frac as u128 + cost as u128 * p.window_us as u128;
            let limit = p.limit as u128;
            *state = Some(State::Tat {
                us: us + (total / limit) as u64,
                frac: (total % limit) as u64,
            });
        }
    }
}

/// What is left now, in whole cost units.
pub fn remaining(state: &Option<State>, p: &LimitParams, now: u64) -> u64 {
    match p.algorithm {
        Algorithm::TokenBucket => {
            let full = p.burst as u128 * p.window_us as u128;
            (full.saturating_sub(debt(state, p, now)) / p.window_us as u128) as u64
        }
        _ => p.limit.saturating_sub(used(state)),
    }
}

/// Time until the limit is whole again (nothing used).
/// An untouched fixed window still reports its window's end, as envoyproxy/ratelimit does.
pub fn reset_after(state: &Option<State>, p: &LimitParams, now: u64) -> u64 {
    match state {
        None if p.algorithm == Algorithm::FixedWindow => p.window_us - now % p.window_us,
        None => 0,
        Some(State::Window { end_us, .. }) => end_us.saturating_sub(now),
        Some(State::Log { entries, .. }) => entries
            .back()
            .map_or(0, |&(t, _)| (t + p.window_us).saturating_sub(now)),
        Some(State::Tat { .. }) => debt(state, p, now).div_ceil(p.limit as u128) as u64,
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
        Some(State::Window { end_us, .. }) => end_us.saturating_sub(now),
        Some(State::Log { entries, total }) => {
            let need = total + k - p.limit;
            let mut freed = 0;
            let mut wait = 0;
            for &(t, c) in entries {
                freed += c;
                wait = (t + p.window_us).saturating_sub(now);
                if freed >= need {
                    break;
                }
            }
            wait
        }
        Some(State::Tat { .. }) => {
            // Smallest w with debt - w·limit + k·window <= burst·window.
            let w = p.window_us as u128;
            let over = (debt(state, p, now) + k as u128 * w).saturating_sub(p.burst as u128 * w);
            over.div_ceil(p.limit as u128) as u64
        }
    })
}

/// When the stored state stops mattering and may be dropped (its TTL).
pub fn expires_at(state: &State, p: &LimitParams) -> u64 {
    match state {
        State::Window { end_us, .. } => *end_us,
        State::Log { entries, .. } => entries.back().map_or(0, |&(t, _)| t + p.window_us),
        State::Tat { us, frac } => us + u64::from(*frac > 0),
    }
}

/// How a charge takes part in the request's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Denies the request when over.
    Enforced,
    /// Reports, never denies (per-rule `shadow_mode`).
    Shadow,
    /// `quota_mode`: the request is denied only when every quota descriptor is over.
    Quota { descriptor: u32 },
}

/// One charge of a batch, pointing at its slot (its counter key's state).
#[derive(Debug, Clone, Copy)]
pub struct BatchCharge {
    pub slot: usize,
    pub params: LimitParams,
    pub cost: u64,
    pub role: Role,
}

/// The state of one distinct key during a batch: as loaded, and as it would be after.
#[derive(Debug, Clone)]
pub struct Slot {
    pub loaded: Option<State>,
    pub after: Option<State>,
    pub overdraft: bool,
    /// Set by `decide_batch`: write `after` back to the store.
    pub commit: bool,
}

impl Slot {
    pub fn new(loaded: Option<State>, params: &LimitParams, now: u64) -> Slot {
        let mut loaded = loaded;
        refresh(&mut loaded, params, now);
        Slot {
            after: loaded.clone(),
            loaded,
            overdraft: params.overdraft,
            commit: false,
        }
    }

    fn final_state(&self) -> &Option<State> {
        if self.commit {
            &self.after
        } else {
            &self.loaded
        }
    }
}

/// What a charge's limit answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The limit had room for this charge (for overdraft: had anything left).
    pub allowed: bool,
    /// What is left after the request, in cost units.
    pub remaining: u64,
    /// Allowed: until the limit is whole again. Denied: until this cost fits; `None` = never.
    pub wait_us: Option<u64>,
}

/// How a request ended, from its charges' verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchVerdict {
    Admit,
    /// Only overdraft limits are over: their charges still land, nothing else does.
    OverdraftOnly,
    Deny,
}

/// Classifies a request from `(role, overdraft, allowed)` per charge.
pub fn batch_verdict(verdicts: impl Iterator<Item = (Role, bool, bool)>) -> BatchVerdict {
    let mut hard = false;
    let mut overdraft = false;
    // Quota descriptors: (descriptor, any denial) — few per request, so a small vec.
    let mut quota: Vec<(u32, bool)> = Vec::new();
    for (role, is_overdraft, allowed) in verdicts {
        match role {
            Role::Shadow => {}
            Role::Enforced if allowed => {}
            Role::Enforced if is_overdraft => overdraft = true,
            Role::Enforced => hard = true,
            Role::Quota { descriptor } => match quota.iter_mut().find(|(d, _)| *d == descriptor) {
                Some(q) => q.1 |= !allowed,
                None => quota.push((descriptor, !allowed)),
            },
        }
    }
    if hard || (!quota.is_empty() && quota.iter().all(|&(_, denied)| denied)) {
        BatchVerdict::Deny
    } else if overdraft {
        BatchVerdict::OverdraftOnly
    } else {
        BatchVerdict::Admit
    }
}

/// Decides a request all-or-nothing. Charges are tried in order against the slots' running
/// state (so two charges on one key add up); then either every slot commits, only overdraft
/// slots do, or none. With `count_rejected` every charge lands, as envoyproxy/ratelimit.
pub fn decide_batch(
    slots: &mut [Slot],
    charges: &[BatchCharge],
    now: u64,
    count_rejected: bool,
) -> Vec<Outcome> {
    let mut allowed = Vec::with_capacity(charges.len());
    for c in charges {
        let slot = &mut slots[c.slot];
        let ok = fits(&slot.after, &c.params, check_cost(&c.params, c.cost), now);
        if ok || c.params.overdraft || count_rejected {
            charge(&mut slot.after, &c.params, c.cost, now);
        }
        allowed.push(ok);
    }
    let verdict = batch_verdict(
        charges
            .iter()
            .zip(&allowed)
            .map(|(c, &ok)| (c.role, c.params.overdraft, ok)),
    );
    for slot in slots.iter_mut() {
        slot.commit = count_rejected
            || match verdict {
                BatchVerdict::Admit => true,
                BatchVerdict::OverdraftOnly => slot.overdraft,
                BatchVerdict::Deny => false,
            };
        slot.commit &= slot.after != slot.loaded;
    }
    charges
        .iter()
        .zip(allowed)
        .map(|(c, ok)| {
            let state = slots[c.slot].final_state();
            Outcome {
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
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn params(algorithm: Algorithm, limit: u64, window_s: u64) -> LimitParams {
        LimitParams {
            algorithm,
            limit,
            window_us: window_s * S,
            burst: limit,
            overdraft: false,
        }
    }

    fn run(state: &mut Option<State>, p: &LimitParams, cost: u64, now: u64) -> Outcome {
        let mut slots = vec![Slot::new(state.take(), p, now)];
        let charges = [BatchCharge {
            slot: 0,
            params: *p,
            cost,
            role: Role::Enforced,
        }];
        let out = decide_batch(&mut slots, &charges, now, false);
        let slot = slots.pop().unwrap();
        *state = if slot.commit { slot.after } else { slot.loaded };
        out[0]
    }

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
        // A fixed window would reset at t0 + 10 s; the sliding one waits for the charge to age out.
        let d = run(&mut st, &p, 1, t0 + 11 * S);
        assert_eq!((d.allowed, d.wait_us), (false, Some(49 * S)));
        assert!(run(&mut st, &p, 1, t0 + 60 * S).allowed);
    }

    #[test]
    fn sliding_window_retry_waits_for_enough_usage_to_leave() {
        let p = params(Algorithm::SlidingWindow, 10, 10);
        let mut st = None;
        let t0 = 100 * S;
        assert!(run(&mut st, &p, 3, t0).allowed);
        assert!(run(&mut st, &p, 3, t0 + S).allowed);
        assert!(run(&mut st, &p, 4, t0 + 2 * S).allowed);
        // Needs 5: the first (3) and second (3) charges must leave.
        let d = run(&mut st, &p, 5, t0 + 3 * S);
        assert_eq!((d.allowed, d.wait_us), (false, Some(8 * S)));
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
            Some(State::Window {
                count: 260,
                end_us: 120 * S
            })
        );
    }

    #[test]
    fn batch_denial_charges_nothing() {
        let p = params(Algorithm::FixedWindow, 1, 60);
        let now = 60 * S;
        let fresh = || {
            let full = State::Window {
                count: 1,
                end_us: 120 * S,
            };
            vec![Slot::new(None, &p, now), Slot::new(Some(full), &p, now)]
        };
        let mut slots = fresh();
        let charges: Vec<BatchCharge> = (0..2)
            .map(|slot| BatchCharge {
                slot,
                params: p,
                cost: 1,
                role: Role::Enforced,
            })
            .collect();
        let out = decide_batch(&mut slots, &charges, now, false);
        assert!(out[0].allowed && !out[1].allowed);
        assert!(!slots[0].commit && !slots[1].commit);
        assert_eq!(out[0].remaining, 1);

        let mut slots = fresh();
        let out = decide_batch(&mut slots, &charges, now, true);
        assert!(out[0].allowed && !out[1].allowed);
        assert!(slots[0].commit && slots[1].commit);
    }

    #[test]
    fn quota_descriptors_deny_only_when_all_are_over() {
        use Role::*;
        let q = |d| Quota { descriptor: d };
        assert_eq!(
            batch_verdict([(q(0), false, false), (q(1), false, true)].into_iter()),
            BatchVerdict::Admit
        );
        assert_eq!(
            batch_verdict([(q(0), false, false), (q(1), false, false)].into_iter()),
            BatchVerdict::Deny
        );
        assert_eq!(
            batch_verdict([(Enforced, false, true), (q(1), false, false)].into_iter()),
            BatchVerdict::Deny
        );
        assert_eq!(
            batch_verdict([(Shadow, false, false), (Enforced, true, false)].into_iter()),
            BatchVerdict::OverdraftOnly
        );
    }
}
