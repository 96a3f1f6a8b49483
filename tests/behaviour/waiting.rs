//! Waiting instead of refusing (`max_wait` on a token bucket), on every store: a burst past
//! the bucket is admitted and each answer held until its cost fits — served in the order the
//! store took them (on Redis, two instances racing), never sooner — and a request that would
//! wait longer than `max_wait`, or than its deadline leaves, is refused at once. A caller that
//! goes away while held gives its place back; `--max-held` refuses rather than queues; the
//! local over-limit cache never refuses a request that could wait.
//!
//! The stores' clock is a manual one, so each hold is exactly what the store computed: a
//! hold is real time slept, and a call's elapsed time is never below it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::base::clock::ManualClock;
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::any::AnyStore;

use crate::support::kit::{
    for_every_store, for_stores, limiter, racing_limiters, store, StoreKind,
};
use crate::support::server::{req, OK, OVER_LIMIT, T0_US};

/// 10 a second, burst 10: a unit refills every 100 ms. `burst` may wait 2 s, `short` 150 ms;
/// `plain` may not wait.
const CONFIG: &str = "\
domain: wait
descriptors:
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, max_wait: 2s}
  - key: short
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, max_wait: 150ms}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
";

const UNIT: Duration = Duration::from_millis(100);

/// One call on `key=value`, with a deadline `deadline` from now (`None`: none): its code and
/// how long the answer took.
async fn ask(
    l: &RateLimiter<AnyStore>,
    key: &str,
    value: &str,
    deadline: Option<Duration>,
) -> (i32, Duration) {
    let started = Instant::now();
    let at = deadline.map(|d| tokio::time::Instant::now() + d);
    let r = l
        .should_rate_limit_by(&req("wait", &[&[(key, value)]]), at)
        .await
        .expect("an answer");
    (r.overall_code, started.elapsed())
}

/// 31 callers at once (spread over `limiters`) on a full bucket that may wait 2 s: the first
/// 10 at once, then one every 100 ms up to 2 s (20 more), and the 31st, which would need
/// 2.1 s, refused at once.
async fn burst(limiters: Vec<Arc<RateLimiter<AnyStore>>>, value: String) {
    let mut tasks = Vec::new();
    for i in 0..31 {
        let l = limiters[i % limiters.len()].clone();
        let value = value.clone();
        tasks.push(tokio::spawn(
            async move { ask(&l, "burst", &value, None).await },
        ));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("a caller"));
    }
    let refused: Vec<Duration> = answers
        .iter()
        .filter(|(code, _)| *code == OVER_LIMIT)
        .map(|(_, d)| *d)
        .collect();
    assert_eq!(refused.len(), 1, "exactly the 31st is refused: {answers:?}");
    assert!(
        refused[0] < Duration::from_millis(500),
        "refused at once, not after waiting: {refused:?}"
    );
    let mut admitted: Vec<Duration> = answers
        .iter()
        .filter(|(code, _)| *code == OK)
        .map(|(_, d)| *d)
        .collect();
    admitted.sort();
    assert_eq!(admitted.len(), 30);
    for (i, took) in admitted.iter().enumerate() {
        // The i-th answer (0-based) fits (i - 9) units later: never sooner, and not much later.
        let due = UNIT * (i.saturating_sub(9) as u32);
        assert!(
            *took + Duration::from_millis(2) >= due,
            "answer {i} came after {took:?}, before its place at {due:?}: {admitted:?}"
        );
        assert!(
            *took < due + Duration::from_millis(400),
            "answer {i} came after {took:?}, long after its place at {due:?}: {admitted:?}"
        );
    }
}

#[test]
fn a_burst_is_admitted_in_order_and_held_until_it_fits() {
    for_stores(&[StoreKind::Memory], |kind| async move {
        let clock = ManualClock::new(T0_US);
        let limiters = racing_limiters(kind, &clock, CONFIG, Settings::default()).await;
        burst(limiters, "one".into()).await;
    });
}

#[test]
fn two_instances_racing_hold_their_callers_in_one_order() {
    for_stores(&[StoreKind::Redis, StoreKind::Cluster], |kind| async move {
        let clock = ManualClock::new(T0_US);
        let limiters = racing_limiters(kind, &clock, CONFIG, Settings::default()).await;
        burst(limiters, "two".into()).await;
    });
}

/// What the deadline leaves bounds the wait; a limit without `max_wait` never waits; a caller
/// that goes away gives its place back; `--max-held` refuses instead of queueing.
async fn bounds(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let settings = Settings {
        max_held: 3,
        ..Settings::default()
    };
    let l = Arc::new(limiter(CONFIG, settings, store(kind, &clock).await));
    let drain = |key: &'static str, value: &'static str| {
        let l = l.clone();
        async move {
            for _ in 0..10 {
                assert_eq!(ask(&l, key, value, None).await.0, OK, "{key}: the burst");
            }
        }
    };

    // Without max_wait: refused at once, as always.
    drain("plain", "p").await;
    let (code, took) = ask(&l, "plain", "p", None).await;
    assert_eq!(code, OVER_LIMIT);
    assert!(took < Duration::from_millis(90), "{took:?}");

    // A 450 ms deadline leaves 400 ms (less a tenth, at least 8 ms): places at 100..400 ms are
    // held, the 500 ms one is refused at once.
    drain("burst", "deadline").await;
    for k in 1..=4u32 {
        let (code, took) = ask(&l, "burst", "deadline", Some(Duration::from_millis(450))).await;
        assert_eq!(code, OK, "place {k} fits within the deadline");
        assert!(took + Duration::from_millis(2) >= UNIT * k, "{k}: {took:?}");
    }
    let (code, took) = ask(&l, "burst", "deadline", Some(Duration::from_millis(450))).await;
    assert_eq!((code, took < UNIT), (OVER_LIMIT, true), "{took:?}");
    // A deadline that leaves nothing: no wait at all, and the local over-limit cache (on
    // Redis) remembers the bucket exhausted ...
    let (code, _) = ask(&l, "burst", "deadline", Some(Duration::from_millis(5))).await;
    assert_eq!(code, OVER_LIMIT);
    // ... which never refuses a request that may wait: it is held to its place (500 ms).
    let (code, took) = ask(&l, "burst", "deadline", None).await;
    assert_eq!(code, OK, "the cache refused a request that could wait");
    assert!(took + Duration::from_millis(2) >= UNIT * 5, "{took:?}");

    // A caller gone while held gives its place back: after it, the next caller still finds
    // the place 100 ms ahead (within `short`'s 150 ms), not 200 ms.
    drain("short", "gone").await;
    let gone = {
        let l = l.clone();
        tokio::spawn(async move { ask(&l, "short", "gone", None).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    gone.abort();
    assert!(gone.await.is_err(), "cancelled while held");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, took) = ask(&l, "short", "gone", None).await;
    assert_eq!(code, OK, "the place the gone caller held was given back");
    assert!(took + Duration::from_millis(2) >= UNIT, "{took:?}");
    // Without a give-back this one would be the third place (300 ms): refused.
    let (code, _) = ask(&l, "short", "gone", None).await;
    assert_eq!(code, OVER_LIMIT, "one place only was given back");

    // --max-held 3: of 6 callers that could all wait, 3 are held and 3 refused at once.
    drain("burst", "held").await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let l = l.clone();
        tasks.push(tokio::spawn(
            async move { ask(&l, "burst", "held", None).await },
        ));
    }
    let mut codes = Vec::new();
    for t in tasks {
        let (code, took) = t.await.expect("a caller");
        if code == OVER_LIMIT {
            assert!(took < UNIT, "the bound refuses at once: {took:?}");
        }
        codes.push(code);
    }
    assert_eq!(
        codes.iter().filter(|&&c| c == OK).count(),
        3,
        "held at most --max-held: {codes:?}"
    );
}

#[test]
fn deadlines_cancellations_and_the_held_bound_are_kept() {
    for_every_store(bounds);
}
