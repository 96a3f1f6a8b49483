//! Regressions for every exactness hole found by testing tollgate from outside (the
//! exactness issue's list), each on every store it concerns. A failing case names its store.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use tokio::sync::Barrier;
use tollgate::base::clock::ManualClock;
use tollgate::pb::common::rate_limit_descriptor::RateLimitOverride;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::service::error::CallError;
use tollgate::service::settings::{FailureMode, Settings};
use tollgate::service::validate::Bounds;
use tollgate::service::RateLimiter;
use tollgate::store::redis::options::KEY_FORMAT;
use tollgate::store::Store;

use crate::support::kit::{
    blocking, for_every_store, for_stores, limiter, redis_cluster, redis_single, store, store_with,
    AnyStore, RedisSetup, StoreKind,
};
use crate::support::server::{descriptor, OK, OVER_LIMIT};

const S: u64 = 1_000_000;
/// An hour boundary.
const T0: u64 = 1_800_000_000_000_000;

fn d(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    descriptor(entries)
}

fn hits(mut desc: RateLimitDescriptor, cost: u64) -> RateLimitDescriptor {
    desc.hits_addend = Some(cost);
    desc
}

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask<S: Store>(l: &RateLimiter<S>, r: &RateLimitRequest) -> RateLimitResponse {
    l.should_rate_limit(r)
        .await
        .unwrap_or_else(|e| panic!("{r:?}: {e:?}"))
}

/// `(code, remaining)` of a check-only look at one descriptor.
async fn look<S: Store>(l: &RateLimiter<S>, domain: &str, entries: &[(&str, &str)]) -> (i32, u32) {
    let resp = ask(l, &req(domain, vec![hits(d(entries), 0)])).await;
    (resp.statuses[0].code, resp.statuses[0].limit_remaining)
}

// --- 1. Quota descriptors decided one way -------------------------------------------------

const QUOTA_FREE_PASS: &str = "
domain: h1
descriptors:
  - key: plan
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: burst
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: unl
    quota_mode: true
    rate_limit: {unlimited: true}
  - key: gone
    quota_mode: true
    rate_limit: {name: replaced, unit: minute, requests_per_unit: 1}
  - key: ip2
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: replaced}]}
";

/// Ten requests in a minute against `ip` (5/min) next to quota descriptors that can never deny
/// the request: OK five times, then OVER_LIMIT, and `ip` charged exactly five times.
async fn quota_descriptors_give_no_free_pass(kind: StoreKind) {
    let clock = ManualClock::new(T0);
    let l = limiter(
        QUOTA_FREE_PASS,
        Settings::default(),
        store(kind, &clock).await,
    );
    // (what, the request, the descriptor that must have been charged five times)
    type Variant = (
        &'static str,
        Vec<RateLimitDescriptor>,
        &'static [(&'static str, &'static str)],
    );
    let variants: Vec<Variant> = vec![
        (
            "shadow quota + quota",
            vec![d(&[("plan", "p")]), d(&[("burst", "b")]), d(&[("ip", "x")])],
            &[("ip", "x")],
        ),
        (
            "quota with an override",
            vec![
                d(&[("plan", "p")]),
                RateLimitDescriptor {
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 1,
                        unit: 2,
                    }),
                    ..d(&[("burst", "o")])
                },
                d(&[("ip", "y")]),
            ],
            &[("ip", "y")],
        ),
        (
            "unlimited quota",
            vec![d(&[("unl", "u")]), d(&[("burst", "c")]), d(&[("ip", "z")])],
            &[("ip", "z")],
        ),
        (
            "quota whose limits are all replaced",
            vec![
                d(&[("gone", "g")]),
                d(&[("burst", "e")]),
                d(&[("ip2", "w")]),
            ],
            &[("ip2", "w")],
        ),
    ];
    for (what, descriptors, ip) in variants {
        let r = req("h1", descriptors);
        let mut codes = Vec::new();
        for _ in 0..10 {
            codes.push(ask(&l, &r).await.overall_code);
        }
        let want: Vec<i32> = [OK; 5].into_iter().chain([OVER_LIMIT; 5]).collect();
        assert_eq!(codes, want, "[{}] {what}", kind.name());
        assert_eq!(
            look(&l, "h1", ip).await,
            (OVER_LIMIT, 0),
            "[{}] {what}: ip charged five times",
            kind.name()
        );
    }
}

#[test]
fn hole_1_quota_descriptors_give_no_free_pass() {
    for_every_store(quota_descriptors_give_no_free_pass);
}

// --- 2. A quota descriptor with several limits ---------------------------------------------

const QUOTA_TWO_LIMITS: &str = "
domain: h2
descriptors:
  - key: user
    quota_mode: true
    rate_limits:
      - {name: short, unit: second, requests_per_unit: 1, window: 2s}
      - {name: hour, unit: hour, requests_per_unit: 3}
";

/// A quota descriptor is over when one of its limits denies, and a denied request charges
/// nothing: OK, OVER, (2 s later) OK, (2 s later) OK on every store.
async fn quota_descriptor_with_two_limits(kind: StoreKind) {
    let clock = ManualClock::new(T0);
    let l = limiter(
        QUOTA_TWO_LIMITS,
        Settings::default(),
        store(kind, &clock).await,
    );
    let r = req("h2", vec![d(&[("user", "u")])]);
    let mut codes = Vec::new();
    for advance in [0, 0, 2 * S, 2 * S] {
        clock.advance(advance);
        codes.push(ask(&l, &r).await.overall_code);
    }
    assert_eq!(codes, [OK, OVER_LIMIT, OK, OK], "[{}]", kind.name());
}

#[test]
fn hole_2_a_quota_descriptor_is_over_when_any_of_its_limits_denies() {
    for_every_store(quota_descriptor_with_two_limits);
}

// --- 3. Huge costs --------------------------------------------------------------------------

const HUGE: &str = "
domain: h3
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 100, overdraft: true}
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, overdraft: true}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window, overdraft: true}
";

/// A cost above --max-hits is INVALID_ARGUMENT; the largest allowed cost neither wraps a
/// counter nor makes a script fail, and overdraft debt stops at 100 × capacity, so no wait
/// (and no key's TTL) goes past 101 windows.
async fn huge_costs_are_bounded(kind: StoreKind) {
    let clock = ManualClock::new(T0 + 10 * S);
    let settings = Settings {
        bounds: Bounds {
            max_hits: 1 << 40,
            ..Bounds::default()
        },
        ..Settings::default()
    };
    let prefix = format!("h3{}:", kind.name());
    let st = store_with(kind, &clock, |s| s.key_prefix = prefix.clone()).await;
    let strict = limiter(HUGE, Settings::default(), st.clone());
    let l = limiter(HUGE, settings, st);
    let too_big = req("h3", vec![hits(d(&[("fw", "a")]), u32::MAX as u64 + 1)]);
    match strict.should_rate_limit(&too_big).await {
        Err(e @ CallError::Invalid(_)) => assert!(e.to_string().contains("--max-hits"), "{e}"),
        other => panic!("[{}] cost above --max-hits: {other:?}", kind.name()),
    }
    for key in ["fw", "tb", "sw"] {
        let r1 = req("h3", vec![hits(d(&[(key, "a")]), 100)]);
        let r2 = req("h3", vec![hits(d(&[(key, "a")]), (1 << 40) - 100)]);
        ask(&l, &r1).await;
        let resp = ask(&l, &r2).await;
        assert_eq!(resp.overall_code, OVER_LIMIT, "[{}] {key}", kind.name());
        // Check-only: still over (nothing wrapped), and it waits at most 101 windows.
        let check = ask(&l, &req("h3", vec![hits(d(&[(key, "a")]), 0)])).await;
        let s = &check.statuses[0];
        assert_eq!(s.code, OVER_LIMIT, "[{}] {key}: {check:?}", kind.name());
        let wait = s.duration_until_reset.map_or(0, |d| d.seconds);
        assert!(
            (1..=101 * 60).contains(&wait),
            "[{}] {key}: waits {wait} s",
            kind.name()
        );
    }
    // The stored keys expire within 101 windows (plus the TTL slack).
    if kind != StoreKind::Memory {
        for (port, key) in stored_keys(kind, &prefix) {
            let pttl: i64 = blocking(|| cli(kind, port, &["PTTL", &key]))
                .parse()
                .expect("PTTL");
            assert!(
                (1..=101 * 60_000 + 1_000).contains(&pttl),
                "[{}] {key}: PTTL {pttl} ms",
                kind.name()
            );
        }
    }
}

#[test]
fn hole_3_huge_costs_neither_wrap_nor_lock_out() {
    for_every_store(huge_costs_are_bounded);
}

/// Every counter key under `prefix` (not the store's marker keys), with the port of the
/// server that holds it.
fn stored_keys(kind: StoreKind, prefix: &str) -> Vec<(u16, String)> {
    let pattern = format!("{prefix}*");
    let ports = match kind {
        StoreKind::Memory => Vec::new(),
        StoreKind::Redis => vec![redis_single().port()],
        StoreKind::Cluster => redis_cluster().masters(),
    };
    blocking(|| {
        ports
            .into_iter()
            .flat_map(|port| {
                cli(kind, port, &["KEYS", &pattern])
                    .lines()
                    .filter(|l| !l.is_empty() && !is_marker(l, prefix))
                    .map(|k| (port, k.to_string()))
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

fn cli(kind: StoreKind, port: u16, args: &[&str]) -> String {
    match kind {
        StoreKind::Cluster => redis_cluster().cli(port, args),
        _ => redis_single().cli(args),
    }
}

// --- 4, 5. Refunds under concurrency ---------------------------------------------------------

fn refund_config(algorithm: &str) -> String {
    format!(
        "
domain: h4
descriptors:
  - key: a
    rate_limit: {{unit: minute, requests_per_unit: 1000, algorithm: {algorithm}}}
  - key: b
    rate_limit: {{unit: hour, requests_per_unit: 1}}
"
    )
}

/// `b` exhausted, then 300 concurrent `[a][b]` (all denied: on a cluster `a`'s tentative
/// charges are refunded; on one node, one group, they never land) and 20 `[a]`: `a` must be
/// left with exactly 980.
async fn refunds_are_exact_under_concurrency(kind: StoreKind, algorithm: &str) -> u32 {
    let clock = ManualClock::new(T0 + 10 * S);
    let st = store_with(kind, &clock, |s| s.local_cache_size = 0).await;
    let l = Arc::new(limiter(&refund_config(algorithm), Settings::default(), st));
    ask(&l, &req("h4", vec![d(&[("b", "y")])])).await;
    let n = 320;
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let l = l.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let descriptors = if i % 16 == 0 {
                    vec![d(&[("a", "x")])]
                } else {
                    vec![d(&[("a", "x")]), d(&[("b", "y")])]
                };
                barrier.wait().await;
                ask(&l, &req("h4", descriptors)).await.overall_code
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        if t.await.expect("task") == OK {
            ok += 1;
        }
    }
    assert_eq!(
        ok,
        20,
        "[{}] {algorithm}: only the [a] requests pass",
        kind.name()
    );
    look(&l, "h4", &[("a", "x")]).await.1
}

#[test]
fn hole_4_sliding_window_refunds_are_exact_under_concurrency() {
    for_every_store(|kind| async move {
        let left = refunds_are_exact_under_concurrency(kind, "sliding_window").await;
        assert_eq!(left, 980, "[{}] sliding window: refunds lost", kind.name());
    });
}

#[test]
fn hole_5_token_bucket_never_refunds_more_than_was_charged() {
    for_every_store(|kind| async move {
        for algorithm in ["token_bucket", "fixed_window"] {
            let left = refunds_are_exact_under_concurrency(kind, algorithm).await;
            assert!(
                left <= 980,
                "[{}] {algorithm}: {left} left, more than the 980 the 20 admitted requests left",
                kind.name()
            );
            if kind == StoreKind::Memory || algorithm == "fixed_window" {
                assert_eq!(left, 980, "[{}] {algorithm}", kind.name());
            }
        }
    });
}

// --- 6. Refunds on every path: a script that runs after its deadline ------------------------

const LATE: &str = "
domain: h6
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
";

/// Redis is paused past the decision's deadline (SIGSTOP), the caller gets the failure policy
/// (and another caller cancels its call), then Redis resumes and runs the queued scripts:
/// the counters end as if those requests never happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole_6_a_script_that_runs_after_its_deadline_leaves_no_charge() {
    let server = blocking(crate::support::redis::RedisServer::start);
    let clock = ManualClock::new(T0 + 10 * S);
    let mut setup = RedisSetup::new(server.url(), &clock);
    setup.timeout = Duration::from_millis(100);
    setup.local_cache_size = 0;
    let st = Arc::new(AnyStore::from(setup.connect()));
    crate::support::kit::wait_ready(st.as_ref()).await;
    let l = Arc::new(limiter(
        LATE,
        Settings {
            failure_mode: FailureMode::Error,
            ..Settings::default()
        },
        st,
    ));
    let both = req("h6", vec![d(&[("a", "x")]), d(&[("b", "x")])]);
    assert_eq!(ask(&l, &both).await.overall_code, OK);

    let pid = server.pid().expect("redis runs") as i32;
    // SAFETY: signalling the test's own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let late = l.should_rate_limit(&both).await;
    assert!(
        matches!(late, Err(CallError::Unavailable(_))),
        "past the deadline: {late:?}"
    );
    // A caller that gives up on its own (Envoy's 20 ms timeout) cancels the call.
    let cancelled =
        tokio::time::timeout(Duration::from_millis(20), l.should_rate_limit(&both)).await;
    assert!(cancelled.is_err(), "the call was cancelled");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };

    // The late scripts run and their charges are refunded: 9 left on both, as after the
    // first request alone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let a = look(&l, "h6", &[("a", "x")]).await;
        let b = look(&l, "h6", &[("b", "x")]).await;
        if (a, b) == ((OK, 9), (OK, 9)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "late charges stayed: a {a:?}, b {b:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// On a serving thread's runtime (current-thread: script calls are batched), calls that
/// arrive together join one batch, which the first of them sends. That call and another are
/// cancelled while the batch waits: the batch still leaves, the others are answered, and
/// the cancelled calls leave no charge.
#[tokio::test(flavor = "current_thread")]
async fn hole_6_a_cancelled_call_neither_strands_its_batch_nor_keeps_a_charge() {
    // Started before the runtime has work: a current-thread runtime cannot block aside.
    let server = crate::support::redis::RedisServer::start();
    let clock = ManualClock::new(T0 + 10 * S);
    let mut setup = RedisSetup::new(server.url(), &clock);
    setup.local_cache_size = 0;
    let st = Arc::new(AnyStore::from(setup.connect()));
    crate::support::kit::wait_ready(st.as_ref()).await;
    let l = limiter(LATE, Settings::default(), st);
    let reqs: Vec<_> = (0..8)
        .map(|i| req("h6", vec![d(&[("a", &format!("v{i}"))])]))
        .collect();
    let mut calls: Vec<_> = reqs
        .iter()
        .map(|r| Box::pin(l.should_rate_limit(r)))
        .collect();
    for call in calls.iter_mut() {
        assert!(futures::poll!(call).is_pending(), "waits for the batch");
    }
    // The first call opened the batch and sends it once it runs again.
    drop(calls.remove(3));
    drop(calls.remove(0));
    for r in futures::future::join_all(calls).await {
        assert_eq!(r.expect("answered").overall_code, OK);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut left = Vec::new();
        for i in 0..8 {
            left.push(look(&l, "h6", &[("a", &format!("v{i}"))]).await.1);
        }
        if left == [10, 9, 9, 10, 9, 9, 9, 9] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "remaining per tenant: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// --- 7. Time stepping back -------------------------------------------------------------------

const BACKWARDS: &str = "
domain: h7
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
";

/// A charge made after the clock stepped back goes in the newest entry, so neither charge is
/// forgotten before the newest one's window ends (and a Redis key outlives both).
async fn a_clock_stepping_back_forgets_no_live_charge(kind: StoreKind) {
    let clock = ManualClock::new(T0 + 100 * S);
    let l = limiter(BACKWARDS, Settings::default(), store(kind, &clock).await);
    let r = req("h7", vec![d(&[("k", "a")])]);
    assert_eq!(ask(&l, &r).await.overall_code, OK);
    clock.set(T0 + 40 * S);
    assert_eq!(ask(&l, &r).await.overall_code, OK);
    clock.set(T0 + 130 * S);
    assert_eq!(
        look(&l, "h7", &[("k", "a")]).await,
        (OVER_LIMIT, 0),
        "[{}] both charges still count at 130 s",
        kind.name()
    );
}

#[test]
fn hole_7_a_clock_stepping_back_forgets_no_live_charge() {
    for_every_store(a_clock_stepping_back_forgets_no_live_charge);
}

// --- 8. The failure policy keeps shadow and quota --------------------------------------------

const FAILURE: &str = "
domain: h8
descriptors:
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: qs
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
";

/// With Redis unreachable and `--failure-mode deny`, the one denial rule still answers:
/// shadow never blocks, quota denies only when every quota descriptor is over, and global
/// shadow mode answers OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole_8_the_failure_policy_keeps_shadow_and_quota() {
    let port = crate::support::server::free_port();
    let clock = ManualClock::new(T0);
    let mut setup = RedisSetup::new(format!("redis://127.0.0.1:{port}"), &clock);
    setup.timeout = Duration::from_millis(50);
    let st = Arc::new(AnyStore::from(setup.connect()));
    let deny = |global_shadow| Settings {
        failure_mode: FailureMode::Deny,
        global_shadow,
        ..Settings::default()
    };
    let l = limiter(FAILURE, deny(false), st.clone());
    let shadow_all = limiter(FAILURE, deny(true), st);
    let cases: Vec<(Vec<RateLimitDescriptor>, i32)> = vec![
        (vec![d(&[("shadowed", "x")])], OK),
        (vec![d(&[("plain", "x")])], OVER_LIMIT),
        (vec![d(&[("q1", "x")]), d(&[("q2", "x")])], OVER_LIMIT),
        (vec![d(&[("q1", "x")]), d(&[("qs", "x")])], OK),
        (vec![d(&[("q1", "x")]), d(&[("plain", "x")])], OVER_LIMIT),
    ];
    for (descriptors, want) in cases {
        let r = req("h8", descriptors);
        assert_eq!(ask(&l, &r).await.overall_code, want, "{r:?}");
        assert_eq!(
            ask(&shadow_all, &r).await.overall_code,
            OK,
            "global shadow {r:?}"
        );
    }
}

// --- 9. The local cache follows the reporting rule -------------------------------------------

const CACHED: &str = "
domain: h9
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 1}
";

/// A request whose one limit is known exhausted still reports its other descriptors as they
/// stand (10 left, not 0), and one over on every limit reports every one OVER — the same on a
/// Redis store with its over-limit cache as on the memory store.
async fn the_cache_reports_what_the_store_would(kind: StoreKind) {
    let clock = ManualClock::new(T0 + 10 * S);
    let st = store_with(kind, &clock, |s| s.local_cache_size = 1000).await;
    let l = limiter(CACHED, Settings::default(), st);
    ask(&l, &req("h9", vec![d(&[("a", "x")])])).await;
    ask(&l, &req("h9", vec![d(&[("c", "x")])])).await;
    let summary = |r: &RateLimitResponse| -> Vec<(i32, u32, Option<i64>)> {
        r.statuses
            .iter()
            .map(|s| {
                (
                    s.code,
                    s.limit_remaining,
                    s.duration_until_reset.map(|d| d.seconds),
                )
            })
            .collect()
    };
    for _ in 0..3 {
        let mixed = ask(&l, &req("h9", vec![d(&[("a", "x")]), d(&[("b", "x")])])).await;
        assert_eq!(
            summary(&mixed),
            [(OVER_LIMIT, 0, Some(50)), (OK, 10, Some(50))],
            "[{}]",
            kind.name()
        );
        let all = ask(&l, &req("h9", vec![d(&[("a", "x")]), d(&[("c", "x")])])).await;
        assert_eq!(
            summary(&all),
            [(OVER_LIMIT, 0, Some(50)), (OVER_LIMIT, 0, Some(50))],
            "[{}]",
            kind.name()
        );
    }
}

#[test]
fn hole_9_a_request_answered_from_the_cache_follows_the_reporting_rule() {
    for_every_store(the_cache_reports_what_the_store_would);
}

// --- 11. Rolling upgrades ---------------------------------------------------------------------

const UPGRADE: &str = "
domain: h11
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket}
";

/// Keys carry their format version: state a previous format left under the unversioned key
/// (an exhausted token bucket in 16 bytes) is never read by this version, which counts under
/// its own keys, and the old key is left as it was.
async fn formats_never_read_each_other(kind: StoreKind) {
    // One node to connect to (fred follows the cluster from there).
    let url = match kind {
        StoreKind::Memory => return,
        StoreKind::Redis => blocking(|| redis_single().url()),
        StoreKind::Cluster => {
            let port = blocking(|| redis_cluster().masters()[0]);
            format!("redis-cluster://127.0.0.1:{port}")
        }
    };
    let clock = ManualClock::new(T0 + 10 * S);
    let prefix = format!("h11{}:", kind.name());
    let old_key = format!("{prefix}{{h11|k=a}}|t60r10b10");
    let old_value: Vec<u8> = [(T0 + 70 * S) as f64, 0f64]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let config = Config::from_url(&url).expect("fred config");
    let client = Client::new(config, None, None, None);
    client.init().await.expect("connect");
    let _: () = client
        .set(&old_key, old_value.as_slice(), None, None, false)
        .await
        .expect("write the old format");

    let st = store_with(kind, &clock, |s| s.key_prefix = prefix.clone()).await;
    let l = limiter(UPGRADE, Settings::default(), st);
    let resp = ask(&l, &req("h11", vec![d(&[("k", "a")])])).await;
    assert_eq!(
        (resp.overall_code, resp.statuses[0].limit_remaining),
        (OK, 9),
        "[{}] the old format's exhausted bucket was read",
        kind.name()
    );
    let kept: Vec<u8> = client.get(&old_key).await.expect("read the old key");
    assert_eq!(kept, old_value, "[{}] the old key changed", kind.name());
    for (_, key) in stored_keys(kind, &prefix) {
        assert!(
            key == old_key || key.starts_with(&format!("{prefix}{KEY_FORMAT}")),
            "[{}] unversioned key {key}",
            kind.name()
        );
    }
    let _ = client.quit().await;
}

#[test]
fn hole_11_formats_never_read_each_other() {
    for_every_store(formats_never_read_each_other);
}

// --- Keys expire with their window ------------------------------------------------------------

const SHORT_WINDOW: &str = "
domain: ttl
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 100}
";

/// A fixed-window key expires at its window's end plus the slack however often it is charged
/// (a charge on a live window keeps the key's expiry, `KEEPTTL`), so no key outlives it.
async fn keys_expire_with_their_window(kind: StoreKind) {
    // 0.4 s before a minute ends: the key lives 0.4 s + 1 s of slack.
    let clock = ManualClock::new(T0 + 60 * S - 400_000);
    let prefix = format!("ttl{}:", kind.name());
    let st = store_with(kind, &clock, |s| s.key_prefix = prefix.clone()).await;
    let l = limiter(SHORT_WINDOW, Settings::default(), st);
    let r = req("ttl", vec![d(&[("fw", "a")])]);
    ask(&l, &r).await;
    let pttl = |key: &str, port| -> i64 {
        let key = key.to_string();
        blocking(move || cli(kind, port, &["PTTL", &key]))
            .parse()
            .expect("PTTL")
    };
    let keys = stored_keys(kind, &prefix);
    assert_eq!(keys.len(), 1, "[{}] {keys:?}", kind.name());
    let (port, key) = keys[0].clone();
    let first = pttl(&key, port);
    assert!(
        (1..=1_400).contains(&first),
        "[{}] PTTL {first}",
        kind.name()
    );
    for _ in 0..5 {
        clock.advance(50_000);
        assert_eq!(ask(&l, &r).await.overall_code, OK);
        let now = pttl(&key, port);
        assert!(
            (1..=first).contains(&now),
            "[{}] PTTL {now} after {first}",
            kind.name()
        );
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(stored_keys(kind, &prefix), vec![], "[{}]", kind.name());
}

#[test]
fn fixed_window_keys_expire_with_their_window() {
    for_stores(
        &[StoreKind::Redis, StoreKind::Cluster],
        keys_expire_with_their_window,
    );
}

// --- A hot sliding window's log stays bounded ---------------------------------------------------

const HOT_SLIDING: &str = "
domain: slide
descriptors:
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 100000, algorithm: sliding_window}
";

/// One key charged in every 60 ms granule for three minutes: its log holds a window's 1,000
/// granules. The script forgets entries by moving the log's head (it never rewrites the whole
/// log on a charge), and rewrites the log without them once they outnumber the live ones, so
/// the value never grows past twice a window's granules (without that it would hold all
/// 3,000).
async fn a_hot_sliding_window_keeps_its_log_bounded(kind: StoreKind) {
    let clock = ManualClock::new(T0);
    let prefix = format!("slide{}:", kind.name());
    let st = store_with(kind, &clock, |s| {
        s.key_prefix = prefix.clone();
        s.local_cache_size = 0;
    })
    .await;
    let l = limiter(HOT_SLIDING, Settings::default(), st);
    let r = req("slide", vec![d(&[("sw", "hot")])]);
    let mut longest = 0;
    for i in 0..3_000 {
        clock.advance(60_000);
        let resp = ask(&l, &r).await;
        assert_eq!(resp.overall_code, OK, "[{}] charge {i}", kind.name());
        if i % 100 == 0 || i == 2_999 {
            let keys = stored_keys(kind, &prefix);
            assert_eq!(keys.len(), 1, "[{}] {keys:?}", kind.name());
            let (port, key) = keys[0].clone();
            let len: usize = blocking(move || cli(kind, port, &["STRLEN", &key]))
                .parse()
                .expect("STRLEN");
            longest = longest.max(len);
        }
        if i == 2_999 {
            // A full window: one unit in each of the last 1,001 granules (a charge stamped
            // with its granule's end is forgotten up to a granule after its window).
            assert_eq!(
                resp.statuses[0].limit_remaining,
                100_000 - 1_001,
                "[{}]",
                kind.name()
            );
        }
    }
    assert!(
        (16 * 1_000..=16 + 2 * 16 * 1_001).contains(&longest),
        "[{}] the log grew to {longest} bytes",
        kind.name()
    );
}

#[test]
fn a_hot_sliding_windows_log_stays_bounded() {
    for_stores(
        &[StoreKind::Redis, StoreKind::Cluster],
        a_hot_sliding_window_keeps_its_log_bounded,
    );
}

/// The store's marker key on a primary (`<prefix>marker:{…}`), not a counter.
fn is_marker(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|rest| rest.starts_with("marker:"))
}
