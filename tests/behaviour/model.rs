//! Properties of the rate-limit arithmetic under arbitrary traffic, checked with proptest:
//!
//! - no algorithm ever admits more than its limit allows: a sliding window in any trailing
//!   window, a token bucket over any span (burst + refill), a fixed window per epoch window;
//! - nor less than the design concedes: a sliding window forgets a charge at most one granule
//!   after its window; a token bucket admits and reports what exact GCRA arithmetic does;
//! - a check-only charge (cost 0) never changes state; an overdraft charge always lands, up
//!   to the debt cap;
//! - a request of several charges commits all of its slots or none;
//! - a denial's wait is honest: the same charge fits after it, and not a millisecond before;
//! - every store, driven through `RateLimiter` with a [`ManualClock`], answers exactly what
//!   the pure model (`algorithm::batch::evaluate` over one counter per key) answers.
//!
//! Traffic is a start time (an arbitrary phase against epoch-aligned windows, at realistic
//! epoch microseconds, where float precision matters) and steps of `(advance µs, cost)`.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::algorithm::batch::{self, evaluate_and_report, BatchCharge};
use tollgate::algorithm::fixed_window::Window;
use tollgate::algorithm::rule::ChargeOutcome as Outcome;
use tollgate::algorithm::rule::Role;
use tollgate::algorithm::sliding_window::{granule_us, Log};
use tollgate::algorithm::token_bucket::Tat;
use tollgate::algorithm::{charge, check_cost, fits, refresh, remaining, State};
use tollgate::base::clock::ManualClock;
use tollgate::limit::{Algorithm, LimitParams};
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::RateLimitRequest;
use tollgate::service::settings::Settings;

use crate::support::kit::{limiter, store, StoreKind};

const S: u64 = 1_000_000;
/// An hour boundary in 2027: every window's epoch alignment starts here.
const T0: u64 = 1_800_000_000_000_000;
/// Float slack for the token bucket's span bound, in tokens.
const TOKEN_TOLERANCE: f64 = 1e-6;

/// `n` cases per property. Failures are reported with their shrunk input, not persisted:
/// every run draws fresh traffic.
fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(n)
    }
}

// --- The model: counters as a store keeps them ---------------------------------------------

/// One counter key: its limit and its stored state, written back only when its slot commits.
#[derive(Debug, Clone)]
struct Counter {
    p: LimitParams,
    stored: Option<State>,
}

impl Counter {
    fn new(p: LimitParams) -> Counter {
        Counter { p, stored: None }
    }

    /// A request of this one charge; returns its outcome and whether its slot committed.
    fn request(&mut self, cost: u64, now: u64) -> (Outcome, bool) {
        let (outcomes, commits) = request(std::slice::from_mut(self), &[(0, cost)], now);
        (outcomes[0], commits[0])
    }

    /// The state the next request at `now` would see.
    fn live(&self, now: u64) -> Option<State> {
        let mut state = self.stored.clone();
        refresh(&mut state, &self.p, now);
        state
    }
}

/// One request of enforced charges `(counter, cost)` on distinct counters, decided
/// all-or-nothing; returns the outcomes and, per charge, whether its slot committed.
fn request(
    counters: &mut [Counter],
    charges: &[(usize, u64)],
    now: u64,
) -> (Vec<Outcome>, Vec<bool>) {
    let mut slots: Vec<batch::Counter> = charges
        .iter()
        .map(|&(i, _)| batch::Counter::new(counters[i].stored.clone(), &counters[i].p, now))
        .collect();
    let batch: Vec<BatchCharge> = charges
        .iter()
        .enumerate()
        .map(|(slot, &(i, cost))| BatchCharge {
            counter: slot,
            params: counters[i].p,
            cost,
            role: Role::Enforced,
            slot: (0, 0),
            pool: 0,
        })
        .collect();
    let outcomes = evaluate_and_report(&mut slots, &batch, now, Default::default(), 0).1;
    let mut commits = Vec::with_capacity(charges.len());
    for (slot, &(i, _)) in slots.into_iter().zip(charges) {
        if slot.commit {
            counters[i].stored = slot.after;
        }
        commits.push(slot.commit);
    }
    (outcomes, commits)
}

/// Runs `steps` against one counter; returns the admitted charges as `(time, cost)`.
fn admitted(p: LimitParams, start: u64, steps: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut counter = Counter::new(p);
    let mut now = T0 + start;
    let mut out = Vec::new();
    for &(advance, cost) in steps {
        now += advance;
        if counter.request(cost, now).0.allowed && cost > 0 {
            out.push((now, cost));
        }
    }
    out
}

// --- Strategies -----------------------------------------------------------------------------

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::FixedWindow),
        Just(Algorithm::SlidingWindow),
        Just(Algorithm::TokenBucket),
    ]
}

/// From 1 ms (a sliding window's granule is then the whole window) to an hour.
fn window_us() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(S),
        Just(60 * S),
        Just(3_600 * S),
        (1u64..=3_000).prop_map(|ms| ms * 1_000),
        1_000u64..=3 * S,
    ]
}

fn params(
    algorithm: impl Strategy<Value = Algorithm>,
    overdraft: bool,
) -> impl Strategy<Value = LimitParams> {
    (algorithm, 1u64..=10, window_us(), 1u64..=15).prop_map(
        move |(algorithm, limit, window_us, burst)| LimitParams {
            algorithm,
            limit,
            window_us,
            burst: if algorithm == Algorithm::TokenBucket {
                burst
            } else {
                limit
            },
            overdraft,
            calendar: None,
            max_wait_us: 0,
            borrow_until: 0,
            fair_floor: 0,
            fair_cap: 0,
            ends_at_us: 0,
        },
    )
}

/// Clock advances that matter to a limit: none, around its granule, within and beyond its window.
fn advance(window_us: u64) -> impl Strategy<Value = u64> {
    let granule = granule_us(window_us);
    prop_oneof![
        3 => Just(0u64),
        3 => 0..=2 * granule,
        3 => 0..=window_us / 4,
        1 => 0..=3 * window_us,
    ]
}

/// A start phase and up to `max_steps` steps of `(advance, cost 0..=capacity+2)`.
fn traffic(
    p: LimitParams,
    advance: impl Strategy<Value = u64>,
    max_steps: usize,
) -> impl Strategy<Value = (u64, Vec<(u64, u64)>)> {
    (
        0..2 * p.window_us,
        prop::collection::vec((advance, 0..=p.capacity() + 2), 1..=max_steps),
    )
}

/// A limit and traffic against it.
fn scenario(
    algorithm: impl Strategy<Value = Algorithm>,
    overdraft: bool,
) -> impl Strategy<Value = (LimitParams, u64, Vec<(u64, u64)>)> {
    params(algorithm, overdraft).prop_flat_map(|p| {
        traffic(p, advance(p.window_us), 120).prop_map(move |(start, steps)| (p, start, steps))
    })
}

// --- Admission bounds -----------------------------------------------------------------------

/// In every trailing window `(t - W, t]` ending at an admitted charge, at most `limit`.
fn check_sliding(p: &LimitParams, admitted: &[(u64, u64)]) -> Result<(), TestCaseError> {
    for &(t, _) in admitted {
        let sum: u64 = admitted
            .iter()
            .filter(|&&(u, _)| u + p.window_us > t && u <= t)
            .map(|&(_, c)| c)
            .sum();
        prop_assert!(
            sum <= p.limit,
            "{sum} admitted in the window ending at T0+{}µs (limit {}, window {}µs): {admitted:?}",
            t - T0,
            p.limit,
            p.window_us
        );
    }
    Ok(())
}

/// Over every span `[t1, t2]` between admitted charges, at most `burst + rate × span`.
fn check_token_bucket(p: &LimitParams, admitted: &[(u64, u64)]) -> Result<(), TestCaseError> {
    for &(t1, _) in admitted {
        for &(t2, _) in admitted.iter().filter(|&&(t, _)| t >= t1) {
            let sum: u64 = admitted
                .iter()
                .filter(|&&(t, _)| t >= t1 && t <= t2)
                .map(|&(_, c)| c)
                .sum();
            let allowed = p.burst as f64 + p.limit as f64 * (t2 - t1) as f64 / p.window_us as f64;
            prop_assert!(
                sum as f64 <= allowed + TOKEN_TOLERANCE,
                "{sum} admitted in [T0+{}, T0+{}]µs, at most {allowed} allowed \
                 (rate {}/{}µs, burst {}): {admitted:?}",
                t1 - T0,
                t2 - T0,
                p.limit,
                p.window_us,
                p.burst
            );
        }
    }
    Ok(())
}

/// In every epoch-aligned window, at most `limit`.
fn check_fixed(p: &LimitParams, admitted: &[(u64, u64)]) -> Result<(), TestCaseError> {
    for &(t, _) in admitted {
        let epoch = t / p.window_us;
        let sum: u64 = admitted
            .iter()
            .filter(|&&(u, _)| u / p.window_us == epoch)
            .map(|&(_, c)| c)
            .sum();
        prop_assert!(
            sum <= p.limit,
            "{sum} admitted in window #{epoch} (limit {}, window {}µs): {admitted:?}",
            p.limit,
            p.window_us
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn sliding_window_admits_at_most_the_limit_in_any_trailing_window(
        (p, start, steps) in scenario(Just(Algorithm::SlidingWindow), false)
    ) {
        check_sliding(&p, &admitted(p, start, &steps))?;
    }

    #[test]
    fn token_bucket_admits_at_most_burst_plus_refill_over_any_span(
        (p, start, steps) in scenario(Just(Algorithm::TokenBucket), false)
    ) {
        check_token_bucket(&p, &admitted(p, start, &steps))?;
    }

    #[test]
    fn fixed_window_admits_at_most_the_limit_per_epoch_window(
        (p, start, steps) in scenario(Just(Algorithm::FixedWindow), false)
    ) {
        check_fixed(&p, &admitted(p, start, &steps))?;
    }
}

// --- No under-admission beyond what the design concedes -------------------------------------

proptest! {
    #![proptest_config(cases(2048))]

    /// Merging may keep a charge counted for up to one granule past its window, never longer:
    /// a charge that fits even when every admitted cost of `(now - W - granule, now]` is
    /// counted must be admitted.
    #[test]
    fn sliding_window_forgets_charges_a_granule_after_their_window(
        (p, start, steps) in params(Just(Algorithm::SlidingWindow), false).prop_flat_map(|p| {
            // Runs of sub-granule steps, and jumps to just around a window later.
            let (w, g) = (p.window_us, granule_us(p.window_us));
            let advance = prop_oneof![
                4 => g / 2..g,
                1 => 0..g,
                2 => w.saturating_sub(3 * g)..=w + 3 * g,
                1 => 0..=w,
            ];
            traffic(p, advance, 120).prop_map(move |(start, steps)| (p, start, steps))
        })
    ) {
        let granule = granule_us(p.window_us);
        let mut counter = Counter::new(p);
        let mut now = T0 + start;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (i, &(advance, cost)) in steps.iter().enumerate() {
            now += advance;
            let counted: u64 = admitted
                .iter()
                .filter(|&&(t, _)| t + p.window_us + granule > now)
                .map(|&(_, c)| c)
                .sum();
            let (outcome, _) = counter.request(cost, now);
            prop_assert!(
                outcome.allowed || counted + check_cost(&p, cost, false) > p.limit,
                "step {i}: cost {cost} denied at T0+{}µs though only {counted} was admitted in \
                 the last window + granule (limit {}, window {}µs, granule {granule}µs); \
                 state {:?}; admitted {admitted:?}",
                now - T0,
                p.limit,
                p.window_us,
                counter.live(now)
            );
            if outcome.allowed && cost > 0 {
                admitted.push((now, cost));
            }
        }
    }

    /// Whatever exact GCRA arithmetic (integers: `tat × limit`, in µs × limit) admits, the
    /// bucket admits, and it reports at least the whole tokens exactly left: float rounding
    /// may be resolved in the caller's favour at the boundary, never against it.
    #[test]
    fn token_bucket_grants_and_reports_what_exact_gcra_does(
        (p, start, steps) in scenario(Just(Algorithm::TokenBucket), false)
    ) {
        let mut counter = Counter::new(p);
        let mut now = T0 + start;
        let mut tat_scaled: u128 = 0;
        let (limit, window, burst) = (
            u128::from(p.limit),
            u128::from(p.window_us),
            u128::from(p.burst),
        );
        for (i, &(advance, cost)) in steps.iter().enumerate() {
            now += advance;
            let now_scaled = u128::from(now) * limit;
            let used_scaled = tat_scaled.saturating_sub(now_scaled);
            let k = u128::from(check_cost(&p, cost, false));
            let exact_fits = used_scaled + k * window <= burst * window;
            let state = counter.live(now);
            let (outcome, _) = counter.request(cost, now);
            prop_assert!(
                outcome.allowed || !exact_fits,
                "step {i}: cost {cost} denied at T0+{}µs though exactly {} of {} tokens are in use \
                 (rate {}/{}µs); state {state:?}",
                now - T0,
                used_scaled as f64 / window as f64,
                p.burst,
                p.limit,
                p.window_us,
            );
            if outcome.allowed && cost > 0 {
                tat_scaled = tat_scaled.max(now_scaled) + u128::from(cost) * window;
            }
            let left_scaled = (burst * window).saturating_sub(tat_scaled.saturating_sub(now_scaled));
            let exact_remaining = (left_scaled / window) as u64;
            prop_assert!(
                outcome.remaining >= exact_remaining,
                "step {i}: cost {cost} at T0+{}µs answered remaining {} though exactly {} tokens \
                 are left (rate {}/{}µs, burst {}); state before {state:?}",
                now - T0,
                outcome.remaining,
                left_scaled as f64 / window as f64,
                p.limit,
                p.window_us,
                p.burst,
            );
        }
    }
}

// --- Check-only and overdraft ---------------------------------------------------------------

proptest! {
    #![proptest_config(cases(384))]

    /// Before every charge, a check-only request: it commits nothing, leaves the stored state
    /// as it was, and is OVER_LIMIT exactly when nothing is left.
    #[test]
    fn check_only_never_changes_state(
        overdraft in any::<bool>(),
        (p, start, steps) in scenario(algorithm(), false),
    ) {
        let p = LimitParams { overdraft, ..p };
        let mut counter = Counter::new(p);
        let mut now = T0 + start;
        for (i, &(advance, cost)) in steps.iter().enumerate() {
            now += advance;
            let before = counter.stored.clone();
            let (check, committed) = counter.request(0, now);
            prop_assert!(!committed, "step {i}: a check-only request committed");
            prop_assert_eq!(&counter.stored, &before, "step {}: state changed", i);
            prop_assert_eq!(
                check.allowed,
                check.remaining > 0,
                "step {}: check-only answered {:?} at T0+{}µs",
                i,
                check,
                now - T0
            );
            counter.request(cost, now);
        }
    }

    /// Every overdraft charge lands up to the debt cap (a full limit plus 100 × capacity): the
    /// fixed window counts every cost of its epoch window, the bucket's arrival time is the
    /// exact GCRA fold of every cost, each stopped at the cap. Either way the limit answers
    /// OK exactly when something was left before the charge.
    #[test]
    fn overdraft_charges_land_up_to_the_debt_cap(
        (p, start, steps) in scenario(
            prop_oneof![Just(Algorithm::FixedWindow), Just(Algorithm::TokenBucket)],
            true,
        )
    ) {
        let mut counter = Counter::new(p);
        let mut now = T0 + start;
        let cap = p.usage_cap();
        // Fixed window: (window index, count).
        let mut window: (u64, u64) = (0, 0);
        // Token bucket, exact: tat × limit, in µs × limit.
        let mut tat_scaled: u128 = 0;
        for (i, &(advance, cost)) in steps.iter().enumerate() {
            now += advance;
            let had_room = fits(&counter.live(now), &p, 1, now);
            let (outcome, committed) = counter.request(cost, now);
            prop_assert_eq!(outcome.allowed, had_room, "step {}", i);
            let now_scaled = u128::from(now) * u128::from(p.limit);
            let added = match p.algorithm {
                Algorithm::FixedWindow => {
                    if window.0 != now / p.window_us {
                        window = (now / p.window_us, 0);
                    }
                    let added = cost.min(cap - window.1);
                    window.1 += added;
                    added
                }
                _ => {
                    let debt = tat_scaled.saturating_sub(now_scaled);
                    let used = debt.div_ceil(u128::from(p.window_us));
                    let added = u128::from(cost).min(u128::from(cap).saturating_sub(used));
                    if added > 0 {
                        tat_scaled = tat_scaled.max(now_scaled) + added * u128::from(p.window_us);
                    }
                    added as u64
                }
            };
            prop_assert_eq!(committed, added > 0, "step {}: charge of {} (adds {})", i, cost, added);
            let live = counter.live(now);
            match p.algorithm {
                Algorithm::FixedWindow => {
                    let count = match live {
                        Some(State::Window(Window { count, .. })) => count,
                        _ => 0,
                    };
                    prop_assert_eq!(count, window.1, "step {}: {:?}", i, live);
                }
                _ => {
                    // The stored `tat` is exact: `us + frac / limit`, scaled by `limit`.
                    let stored = match live {
                        Some(State::Tat(Tat { us, frac, .. })) => {
                            u128::from(us) * u128::from(p.limit) + u128::from(frac)
                        }
                        _ => now_scaled,
                    };
                    prop_assert_eq!(
                        stored.max(now_scaled),
                        tat_scaled.max(now_scaled),
                        "step {}: {:?} (now {})",
                        i,
                        live,
                        now
                    );
                }
            }
        }
    }

    /// A sliding window's overdraft log holds every cost of the trailing window (each charge
    /// stamped with its granule's last microsecond), up to the debt cap.
    #[test]
    fn sliding_overdraft_charges_land_up_to_the_debt_cap(
        (p, start, steps) in params(Just(Algorithm::SlidingWindow), true).prop_flat_map(|p| {
            let g = granule_us(p.window_us);
            let advance = prop_oneof![Just(0u64), g..=g + p.window_us / 4, g..=3 * p.window_us];
            traffic(p, advance, 120).prop_map(move |(start, steps)| (p, start, steps))
        })
    ) {
        let mut counter = Counter::new(p);
        let mut now = T0 + start;
        let mut charged: Vec<(u64, u64)> = Vec::new();
        for (i, &(advance, cost)) in steps.iter().enumerate() {
            now += advance;
            // A charge lives until its granule's last microsecond plus the window.
            let g = granule_us(p.window_us);
            let live_sum = |charged: &[(u64, u64)]| -> u64 {
                charged
                    .iter()
                    .filter(|&&(t, _)| t / g * g + g - 1 + p.window_us > now)
                    .map(|&(_, c)| c)
                    .sum()
            };
            let added = cost.min(p.usage_cap() - live_sum(&charged));
            let (_, committed) = counter.request(cost, now);
            prop_assert_eq!(committed, added > 0, "step {}: charge of {} (adds {})", i, cost, added);
            if added > 0 {
                charged.push((now, added));
            }
            let live = counter.live(now);
            let total = match &live {
                Some(State::Log(Log { total, .. })) => *total,
                _ => 0,
            };
            prop_assert_eq!(total, live_sum(&charged), "step {}: {:?}", i, live);
        }
    }
}

// --- All-or-nothing -------------------------------------------------------------------------

/// 2–4 counters with their own limits, and steps of `(advance, cost per counter, which take part)`.
#[allow(clippy::type_complexity)]
fn batches() -> impl Strategy<Value = (Vec<LimitParams>, u64, Vec<(u64, Vec<u64>, u8)>)> {
    prop::collection::vec(params(algorithm(), false), 2..=4).prop_flat_map(|ps| {
        let costs: Vec<_> = ps.iter().map(|p| 0..=p.capacity() + 2).collect();
        let advance = prop_oneof![
            3 => Just(0u64),
            3 => 0..=5_000u64,
            2 => 0..=2 * S,
            1 => 0..=3_700 * S,
        ];
        (
            Just(ps),
            0..3_600 * S,
            prop::collection::vec((advance, costs, any::<u8>()), 1..=60),
        )
    })
}

proptest! {
    #![proptest_config(cases(512))]

    /// Each charge answers what its own key would; a denied request commits no slot and
    /// leaves every state as it was; an admitted one commits every charged slot.
    #[test]
    fn a_request_commits_all_of_its_charges_or_none((ps, start, steps) in batches()) {
        let mut counters: Vec<Counter> = ps.iter().copied().map(Counter::new).collect();
        let mut now = T0 + start;
        for (step, (advance, costs, mask)) in steps.iter().enumerate() {
            now += advance;
            let mut taking_part: Vec<usize> =
                (0..counters.len()).filter(|i| mask & (1 << i) != 0).collect();
            if taking_part.len() < 2 {
                taking_part = (0..counters.len()).collect();
            }
            let charges: Vec<(usize, u64)> = taking_part.iter().map(|&i| (i, costs[i])).collect();
            let before: Vec<Option<State>> = counters.iter().map(|c| c.stored.clone()).collect();
            let expected: Vec<bool> = charges
                .iter()
                .map(|&(i, cost)| {
                    let p = &counters[i].p;
                    fits(&counters[i].live(now), p, check_cost(p, cost, false), now)
                })
                .collect();
            let mut after_admit: Vec<Option<State>> = Vec::new();
            for &(i, cost) in &charges {
                let mut state = counters[i].live(now);
                charge(&mut state, &counters[i].p, cost, now);
                after_admit.push(state);
            }

            let (outcomes, commits) = request(&mut counters, &charges, now);
            let allowed: Vec<bool> = outcomes.iter().map(|o| o.allowed).collect();
            prop_assert_eq!(&allowed, &expected, "step {}: {:?}", step, charges);
            if expected.iter().all(|&ok| ok) {
                for (k, &(i, cost)) in charges.iter().enumerate() {
                    prop_assert_eq!(commits[k], cost > 0, "step {}: charge {} on counter {}", step, k, i);
                    if cost > 0 {
                        prop_assert_eq!(&counters[i].stored, &after_admit[k], "step {}", step);
                    }
                }
            } else {
                prop_assert!(
                    commits.iter().all(|&c| !c),
                    "step {step}: denied request committed {commits:?} ({charges:?}, {allowed:?})"
                );
                let after: Vec<Option<State>> =
                    counters.iter().map(|c| c.stored.clone()).collect();
                prop_assert_eq!(&after, &before, "step {}: denied request changed state", step);
            }
        }
    }
}

// --- Honest waits ---------------------------------------------------------------------------

/// Denied with `Some(w)`: the same charge fits at `now + w` and (for `w > 1 ms`) not at
/// `now + w - 1 ms`; `None` exactly when the cost exceeds the capacity. Admitted with
/// `Some(r)`: at `now + r` the limit is whole again.
fn check_waits(p: LimitParams, start: u64, steps: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let mut counter = Counter::new(p);
    let mut now = T0 + start;
    for (i, &(advance, cost)) in steps.iter().enumerate() {
        now += advance;
        let before = counter.clone();
        let (outcome, _) = counter.request(cost, now);
        let at = now - T0;
        if cost > p.capacity() {
            prop_assert_eq!(
                (outcome.allowed, outcome.wait_us),
                (false, None),
                "step {}: cost {} above capacity {}",
                i,
                cost,
                p.capacity()
            );
            continue;
        }
        let Some(wait) = outcome.wait_us else {
            return Err(TestCaseError::fail(format!(
                "step {i}: cost {cost} within capacity answered {outcome:?} at T0+{at}µs"
            )));
        };
        if outcome.allowed {
            let whole = remaining(&counter.live(now + wait), &p, now + wait);
            prop_assert_eq!(
                whole,
                p.capacity(),
                "step {}: admitted at T0+{}µs with reset {}µs, but not whole then: {:?}",
                i,
                at,
                wait,
                counter.live(now + wait)
            );
            continue;
        }
        let retried = before.clone().request(cost, now + wait).0;
        prop_assert!(
            retried.allowed,
            "step {i}: cost {cost} denied at T0+{at}µs with wait {wait}µs, \
             denied again then ({retried:?}); state {:?}",
            before.live(now)
        );
        if wait > 1_000 {
            let early = before.clone().request(cost, now + wait - 1_000).0;
            prop_assert!(
                !early.allowed,
                "step {i}: cost {cost} denied at T0+{at}µs with wait {wait}µs, \
                 but fits 1 ms earlier; state {:?}",
                before.live(now)
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn fixed_window_waits_are_honest(
        (p, start, steps) in scenario(Just(Algorithm::FixedWindow), false)
    ) {
        check_waits(p, start, &steps)?;
    }

    #[test]
    fn sliding_window_waits_are_honest(
        (p, start, steps) in scenario(Just(Algorithm::SlidingWindow), false)
    ) {
        check_waits(p, start, &steps)?;
    }

    #[test]
    fn token_bucket_waits_are_honest(
        (p, start, steps) in scenario(Just(Algorithm::TokenBucket), false)
    ) {
        check_waits(p, start, &steps)?;
    }
}

// --- The memory store answers what the model answers ----------------------------------------

/// A rule per descriptor key `k0..kn`, each with its own limit.
fn yaml(ps: &[LimitParams]) -> String {
    let mut out = String::from("domain: prop\ndescriptors:\n");
    for (i, p) in ps.iter().enumerate() {
        let burst = if p.algorithm == Algorithm::TokenBucket {
            format!(", burst: {}", p.burst)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: second, requests_per_unit: {}, \
             algorithm: {}, window: {}ms{burst}, overdraft: {}}}\n",
            p.limit,
            p.algorithm.name(),
            p.window_us / 1_000,
            p.overdraft,
        ));
    }
    out
}

/// 1–3 limits with whole-millisecond windows (as config spells them) and steps of
/// `(advance, cost per descriptor)`.
#[allow(clippy::type_complexity)]
fn store_scenario() -> impl Strategy<Value = (Vec<LimitParams>, u64, Vec<(u64, Vec<u64>)>)> {
    let limit = (
        algorithm(),
        1u64..=10,
        (1u64..=120_000).prop_map(|ms| ms * 1_000),
        1u64..=15,
        any::<bool>(),
    )
        .prop_map(
            |(algorithm, limit, window_us, burst, overdraft)| LimitParams {
                algorithm,
                limit,
                window_us,
                burst: if algorithm == Algorithm::TokenBucket {
                    burst
                } else {
                    limit
                },
                overdraft,
                calendar: None,
                max_wait_us: 0,
                borrow_until: 0,
                fair_floor: 0,
                fair_cap: 0,
                ends_at_us: 0,
            },
        );
    prop::collection::vec(limit, 1..=3).prop_flat_map(|ps| {
        let costs: Vec<_> = ps.iter().map(|p| 0..=p.capacity() + 2).collect();
        let advance = prop_oneof![
            3 => Just(0u64),
            3 => 0..=5_000u64,
            2 => 0..=2 * S,
            1 => 0..=200 * S,
        ];
        (
            Just(ps),
            0..3_600 * S,
            prop::collection::vec((advance, costs), 1..=40),
        )
    })
}

/// Drives `kind`'s store through `RateLimiter` with one step per request and compares every
/// answer with the model's: per descriptor the code, remaining (0 when over) and
/// `duration_until_reset` (whole seconds, rounded up), and the overall code.
fn store_answers_what_the_model_answers(
    kind: StoreKind,
    ps: &[LimitParams],
    start: u64,
    steps: &[(u64, Vec<u64>)],
) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let clock = ManualClock::new(T0 + start);
    let limiter = runtime
        .block_on(async { limiter(&yaml(ps), Settings::default(), store(kind, &clock).await) });
    let mut counters: Vec<Counter> = ps.iter().copied().map(Counter::new).collect();
    let mut now = T0 + start;
    for (step, (advance, costs)) in steps.iter().enumerate() {
        now += advance;
        clock.set(now);
        let req = RateLimitRequest {
            domain: "prop".into(),
            descriptors: costs
                .iter()
                .enumerate()
                .map(|(i, &cost)| RateLimitDescriptor {
                    entries: vec![Entry {
                        key: format!("k{i}"),
                        value: "v".into(),
                    }],
                    hits_addend: Some(cost),
                    ..Default::default()
                })
                .collect(),
            hits_addend: 0,
        };
        let resp = runtime
            .block_on(limiter.should_rate_limit(&req))
            .map_err(|e| TestCaseError::fail(format!("[{}] step {step}: {e:?}", kind.name())))?;
        let charges: Vec<(usize, u64)> = costs.iter().copied().enumerate().collect();
        let (outcomes, _) = request(&mut counters, &charges, now);
        let code = |allowed: bool| if allowed { Code::Ok } else { Code::OverLimit } as i32;
        let want: Vec<(i32, u32, Option<i64>)> = outcomes
            .iter()
            .map(|o| {
                (
                    code(o.allowed),
                    if o.allowed { o.remaining as u32 } else { 0 },
                    o.wait_us.map(|w| w.div_ceil(S) as i64),
                )
            })
            .collect();
        let got: Vec<(i32, u32, Option<i64>)> = resp
            .statuses
            .iter()
            .map(|s| {
                (
                    s.code,
                    s.limit_remaining,
                    s.duration_until_reset.map(|d| d.seconds),
                )
            })
            .collect();
        prop_assert_eq!(
            &got,
            &want,
            "[{}] step {} at T0+{}µs, costs {:?}",
            kind.name(),
            step,
            now - T0,
            costs
        );
        prop_assert_eq!(
            resp.overall_code,
            code(outcomes.iter().all(|o| o.allowed)),
            "[{}] step {}",
            kind.name(),
            step
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(128))]

    #[test]
    fn memory_store_answers_what_the_model_answers((ps, start, steps) in store_scenario()) {
        store_answers_what_the_model_answers(StoreKind::Memory, &ps, start, &steps)?;
    }
}

proptest! {
    #![proptest_config(cases(48))]

    #[test]
    fn redis_store_answers_what_the_model_answers((ps, start, steps) in store_scenario()) {
        store_answers_what_the_model_answers(StoreKind::Redis, &ps, start, &steps)?;
    }

    #[test]
    fn cluster_store_answers_what_the_model_answers((ps, start, steps) in store_scenario()) {
        store_answers_what_the_model_answers(StoreKind::Cluster, &ps, start, &steps)?;
    }
}
