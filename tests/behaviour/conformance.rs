//! One conformance table for every store: timed request sequences under a controlled clock,
//! per algorithm, window, cost, check-only, overdraft, hierarchy, shared limits, shadow,
//! quota and all-or-nothing across descriptors. The same table runs against every store of
//! the kit.

use tollgate::base::clock::ManualClock;
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::service::settings::Settings;

use crate::support::kit::{for_every_store, limiter, store, StoreKind};

/// An hour boundary (so every unit's window starts here).
const T0: u64 = 1_800_000_000_000_000;
const S: u64 = 1_000_000;

const OK: i32 = 1;
const OVER: i32 = 2;

/// What one descriptor must answer: code, deciding limit name (or "" for none / unnamed),
/// remaining, duration_until_reset in seconds (None = absent).
#[derive(Debug, Clone, PartialEq)]
struct Expect {
    code: i32,
    limit: Option<&'static str>,
    remaining: u32,
    reset_s: Option<i64>,
}

fn ok(limit: &'static str, remaining: u32, reset_s: i64) -> Expect {
    Expect {
        code: OK,
        limit: Some(limit),
        remaining,
        reset_s: Some(reset_s),
    }
}

/// An OVER_LIMIT status always reports 0 left (the reporting rule).
fn over(limit: &'static str, reset_s: Option<i64>) -> Expect {
    Expect {
        code: OVER,
        limit: Some(limit),
        remaining: 0,
        reset_s,
    }
}

/// A descriptor: entries, and an optional descriptor-level hits_addend.
struct D(&'static [(&'static str, &'static str)], Option<u64>);

struct Step {
    /// Advance the clock by this many microseconds before the request.
    after_us: u64,
    descriptors: Vec<D>,
    hits: u32,
    overall: i32,
    expect: Vec<Expect>,
}

fn step(after_us: u64, descriptors: Vec<D>, overall: i32, expect: Vec<Expect>) -> Step {
    Step {
        after_us,
        descriptors,
        hits: 0,
        overall,
        expect,
    }
}

struct Case {
    name: &'static str,
    yaml: &'static str,
    /// Starting offset from T0.
    start_us: u64,
    count_rejected: bool,
    steps: Vec<Step>,
}

fn case(name: &'static str, yaml: &'static str, steps: Vec<Step>) -> Case {
    Case {
        name,
        yaml,
        start_us: 0,
        count_rejected: false,
        steps,
    }
}

fn table() -> Vec<Case> {
    vec![
        case(
            "fixed window counts down, denies, resets at the epoch-aligned boundary",
            r#"
domain: c
descriptors:
  - key: k
    rate_limit: {name: fw, unit: minute, requests_per_unit: 3}
"#,
            vec![
                step(
                    15 * S,
                    vec![D(&[("k", "a")], None)],
                    OK,
                    vec![ok("fw", 2, 45)],
                ),
                step(0, vec![D(&[("k", "a")], None)], OK, vec![ok("fw", 1, 45)]),
                step(S, vec![D(&[("k", "a")], None)], OK, vec![ok("fw", 0, 44)]),
                step(
                    S,
                    vec![D(&[("k", "a")], None)],
                    OVER,
                    vec![over("fw", Some(43))],
                ),
                // Another value of a key-only rule has its own counter.
                step(0, vec![D(&[("k", "b")], None)], OK, vec![ok("fw", 2, 43)]),
                step(
                    43 * S,
                    vec![D(&[("k", "a")], None)],
                    OK,
                    vec![ok("fw", 2, 60)],
                ),
            ],
        ),
        case(
            "fixed window with a custom window",
            r#"
domain: c
descriptors:
  - key: k
    rate_limit: {name: w90, unit: minute, requests_per_unit: 1, window: 90s}
"#,
            vec![
                step(0, vec![D(&[("k", "a")], None)], OK, vec![ok("w90", 0, 90)]),
                step(
                    60 * S,
                    vec![D(&[("k", "a")], None)],
                    OVER,
                    vec![over("w90", Some(30))],
                ),
                step(
                    30 * S,
                    vec![D(&[("k", "a")], None)],
                    OK,
                    vec![ok("w90", 0, 90)],
                ),
            ],
        ),
        case(
            "sliding window has no boundary burst and waits for usage to age out",
            // A charge is stamped with the last microsecond of its epoch-aligned granule
            // (window / 1000, here 60 ms: 49.98–50.04 s), so it lives until 50.039999 s + 60 s.
            r#"
domain: c
descriptors:
  - key: k
    rate_limit: {name: sw, unit: minute, requests_per_unit: 10, algorithm: sliding_window}
"#,
            vec![
                step(
                    50 * S,
                    vec![D(&[("k", "a")], Some(10))],
                    OK,
                    vec![ok("sw", 0, 61)],
                ),
                // A fixed window would have reset at 60 s.
                step(
                    11 * S,
                    vec![D(&[("k", "a")], None)],
                    OVER,
                    vec![over("sw", Some(50))],
                ),
                // 110.039998 s: the charge is still in the window...
                step(
                    49 * S + 39_998,
                    vec![D(&[("k", "a")], None)],
                    OVER,
                    vec![over("sw", Some(1))],
                ),
                // ...and gone a microsecond later.
                step(1, vec![D(&[("k", "a")], None)], OK, vec![ok("sw", 9, 60)]),
            ],
        ),
        case(
            "sliding window with costs: retry when enough of the oldest usage leaves",
            r#"
domain: c
descriptors:
  - key: k
    rate_limit: {name: sw, unit: minute, requests_per_unit: 10, algorithm: sliding_window}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("k", "a")], Some(4))],
                    OK,
                    vec![ok("sw", 6, 61)],
                ),
                step(
                    10 * S,
                    vec![D(&[("k", "a")], Some(4))],
                    OK,
                    vec![ok("sw", 2, 61)],
                ),
                // Needs 5 more: the first charge (4, stamped 0.059999 s) and the second (4,
                // stamped 10.019999 s) must leave, at 70.019999 s.
                step(
                    10 * S,
                    vec![D(&[("k", "a")], Some(7))],
                    OVER,
                    vec![over("sw", Some(51))],
                ),
                // Needs 2 more: the first charge must leave, at 60.059999 s.
                step(
                    0,
                    vec![D(&[("k", "a")], Some(4))],
                    OVER,
                    vec![over("sw", Some(41))],
                ),
                step(
                    40 * S + 60_000,
                    vec![D(&[("k", "a")], Some(4))],
                    OK,
                    vec![ok("sw", 2, 61)],
                ),
            ],
        ),
        case(
            "token bucket: burst, continuous refill, and a cost above the burst never fits",
            r#"
domain: c
descriptors:
  - key: k
    rate_limit: {name: tb, unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 5}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("k", "a")], Some(5))],
                    OK,
                    vec![ok("tb", 0, 30)],
                ),
                step(
                    0,
                    vec![D(&[("k", "a")], None)],
                    OVER,
                    vec![over("tb", Some(6))],
                ),
                step(
                    6 * S,
                    vec![D(&[("k", "a")], None)],
                    OK,
                    vec![ok("tb", 0, 30)],
                ),
                step(
                    12 * S,
                    vec![D(&[("k", "a")], Some(2))],
                    OK,
                    vec![ok("tb", 0, 30)],
                ),
                step(
                    0,
                    vec![D(&[("k", "a")], Some(6))],
                    OVER,
                    vec![over("tb", None)],
                ),
            ],
        ),
        case(
            "check-only (cost 0) is OVER_LIMIT exactly when nothing is left and charges nothing",
            r#"
domain: c
descriptors:
  - key: f
    rate_limit: {name: fw, unit: minute, requests_per_unit: 2}
  - key: s
    rate_limit: {name: sw, unit: minute, requests_per_unit: 2, algorithm: sliding_window}
  - key: t
    rate_limit: {name: tb, unit: minute, requests_per_unit: 2, algorithm: token_bucket}
"#,
            vec![
                step(
                    0,
                    vec![
                        D(&[("f", "a")], Some(0)),
                        D(&[("s", "a")], Some(0)),
                        D(&[("t", "a")], Some(0)),
                    ],
                    OK,
                    vec![ok("fw", 2, 60), ok("sw", 2, 0), ok("tb", 2, 0)],
                ),
                step(
                    0,
                    vec![
                        D(&[("f", "a")], Some(2)),
                        D(&[("s", "a")], Some(2)),
                        D(&[("t", "a")], Some(2)),
                    ],
                    OK,
                    vec![ok("fw", 0, 60), ok("sw", 0, 61), ok("tb", 0, 60)],
                ),
                step(
                    S,
                    vec![
                        D(&[("f", "a")], Some(0)),
                        D(&[("s", "a")], Some(0)),
                        D(&[("t", "a")], Some(0)),
                    ],
                    OVER,
                    vec![
                        over("fw", Some(59)),
                        over("sw", Some(60)),
                        over("tb", Some(29)),
                    ],
                ),
            ],
        ),
        case(
            "overdraft: usage lands past the limit, then OVER_LIMIT until repaid",
            r#"
domain: c
descriptors:
  - key: tokens
    rate_limit: {name: tpm, unit: minute, requests_per_unit: 100, overdraft: true}
  - key: bucket
    rate_limit: {name: tb, unit: minute, requests_per_unit: 60, algorithm: token_bucket, overdraft: true}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("tokens", "a")], Some(150))],
                    OK,
                    vec![ok("tpm", 0, 60)],
                ),
                step(
                    S,
                    vec![D(&[("tokens", "a")], Some(0))],
                    OVER,
                    vec![over("tpm", Some(59))],
                ),
                // Usage reported after the fact still lands while over.
                step(
                    0,
                    vec![D(&[("tokens", "a")], Some(10))],
                    OVER,
                    vec![over("tpm", Some(59))],
                ),
                step(
                    59 * S,
                    vec![D(&[("tokens", "a")], Some(0))],
                    OK,
                    vec![ok("tpm", 100, 60)],
                ),
                step(
                    0,
                    vec![D(&[("bucket", "a")], Some(90))],
                    OK,
                    vec![ok("tb", 0, 90)],
                ),
                // 30 tokens of debt: one token fits after 31 s.
                step(
                    0,
                    vec![D(&[("bucket", "a")], Some(0))],
                    OVER,
                    vec![over("tb", Some(31))],
                ),
                step(
                    31 * S,
                    vec![D(&[("bucket", "a")], Some(0))],
                    OK,
                    vec![ok("tb", 1, 59)],
                ),
            ],
        ),
        case(
            "hierarchy: a tenant limit applies to deeper descriptors; a denial charges no level",
            r#"
domain: c
descriptors:
  - key: tenant
    hierarchical: true
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 2}
    descriptors:
      - key: model
        rate_limit: {name: model, unit: hour, requests_per_unit: 3}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("tenant", "a"), ("model", "x")], None)],
                    OK,
                    vec![ok("tenant", 1, 60)],
                ),
                step(
                    0,
                    vec![D(&[("tenant", "a"), ("model", "x")], None)],
                    OK,
                    vec![ok("tenant", 0, 60)],
                ),
                step(
                    0,
                    vec![D(&[("tenant", "a"), ("model", "x")], None)],
                    OVER,
                    vec![over("tenant", Some(60))],
                ),
                // Passing through: a model the config does not name still hits the tenant limit.
                step(
                    0,
                    vec![D(&[("tenant", "a"), ("other", "y")], None)],
                    OVER,
                    vec![over("tenant", Some(60))],
                ),
                // The hourly model counter holds only the two admitted requests.
                step(
                    60 * S,
                    vec![D(&[("tenant", "a"), ("model", "x")], Some(0))],
                    OK,
                    vec![ok("model", 1, 3540)],
                ),
            ],
        ),
        case(
            "shared limit: one counter for all tenants, in its own placement group",
            r#"
domain: c
descriptors:
  - key: tenant
    rate_limits:
      - {name: tenant, unit: minute, requests_per_unit: 3}
      - {name: global, unit: minute, requests_per_unit: 4, shared: true}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("tenant", "a")], None)],
                    OK,
                    vec![ok("tenant", 2, 60)],
                ),
                step(
                    0,
                    vec![D(&[("tenant", "a")], None)],
                    OK,
                    vec![ok("tenant", 1, 60)],
                ),
                step(
                    0,
                    vec![D(&[("tenant", "a")], None)],
                    OK,
                    vec![ok("tenant", 0, 60)],
                ),
                step(
                    0,
                    vec![D(&[("tenant", "a")], None)],
                    OVER,
                    vec![over("tenant", Some(60))],
                ),
                step(
                    0,
                    vec![D(&[("tenant", "b")], None)],
                    OK,
                    vec![ok("global", 0, 60)],
                ),
                step(
                    0,
                    vec![D(&[("tenant", "b")], None)],
                    OVER,
                    vec![over("global", Some(60))],
                ),
                // The denied request did not charge tenant b's own counter (2 left, not 1).
                step(
                    60 * S,
                    vec![D(&[("tenant", "b")], Some(0))],
                    OK,
                    vec![ok("tenant", 3, 60)],
                ),
            ],
        ),
        case(
            "shadow mode limits report but never deny",
            r#"
domain: c
descriptors:
  - key: k
    shadow_mode: true
    rate_limit: {name: shadow, unit: minute, requests_per_unit: 1}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("k", "a")], None)],
                    OK,
                    vec![ok("shadow", 0, 60)],
                ),
                step(
                    0,
                    vec![D(&[("k", "a")], None)],
                    OK,
                    vec![ok("shadow", 0, 60)],
                ),
            ],
        ),
        case(
            "quota mode: the request is over only when every quota descriptor is",
            r#"
domain: c
descriptors:
  - key: backend
    quota_mode: true
    rate_limit: {name: quota, unit: minute, requests_per_unit: 1}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("backend", "a")], None)],
                    OK,
                    vec![ok("quota", 0, 60)],
                ),
                step(
                    0,
                    vec![D(&[("backend", "a")], None), D(&[("backend", "b")], None)],
                    OK,
                    vec![over("quota", Some(60)), ok("quota", 0, 60)],
                ),
                step(
                    0,
                    vec![D(&[("backend", "a")], None), D(&[("backend", "b")], None)],
                    OVER,
                    vec![over("quota", Some(60)), over("quota", Some(60))],
                ),
            ],
        ),
        case(
            "all-or-nothing: a request over on one descriptor charges none",
            r#"
domain: c
descriptors:
  - key: big
    rate_limit: {name: big, unit: minute, requests_per_unit: 5}
  - key: small
    rate_limit: {name: small, unit: minute, requests_per_unit: 1}
"#,
            vec![
                step(
                    0,
                    vec![D(&[("big", "a")], None), D(&[("small", "a")], None)],
                    OK,
                    vec![ok("big", 4, 60), ok("small", 0, 60)],
                ),
                step(
                    0,
                    vec![D(&[("big", "a")], None), D(&[("small", "a")], None)],
                    OVER,
                    vec![ok("big", 4, 60), over("small", Some(60))],
                ),
                step(
                    0,
                    vec![D(&[("big", "a")], Some(0))],
                    OK,
                    vec![ok("big", 4, 60)],
                ),
            ],
        ),
        Case {
            count_rejected: true,
            ..case(
                "count-rejected: every charge lands, as envoyproxy/ratelimit",
                r#"
domain: c
descriptors:
  - key: big
    rate_limit: {name: big, unit: minute, requests_per_unit: 5}
  - key: small
    rate_limit: {name: small, unit: minute, requests_per_unit: 1}
"#,
                vec![
                    step(
                        0,
                        vec![D(&[("big", "a")], None), D(&[("small", "a")], None)],
                        OK,
                        vec![ok("big", 4, 60), ok("small", 0, 60)],
                    ),
                    step(
                        0,
                        vec![D(&[("big", "a")], None), D(&[("small", "a")], None)],
                        OVER,
                        vec![ok("big", 3, 60), over("small", Some(60))],
                    ),
                    step(
                        0,
                        vec![D(&[("big", "a")], Some(0))],
                        OK,
                        vec![ok("big", 3, 60)],
                    ),
                ],
            )
        },
        Case {
            start_us: 30 * S,
            ..case(
                "request-level hits_addend is the cost of descriptors without their own",
                r#"
domain: c
descriptors:
  - key: k
    rate_limit: {name: fw, unit: minute, requests_per_unit: 10}
"#,
                vec![Step {
                    hits: 4,
                    ..step(
                        0,
                        vec![D(&[("k", "a")], None), D(&[("k", "b")], Some(1))],
                        OK,
                        vec![ok("fw", 6, 30), ok("fw", 9, 30)],
                    )
                }],
            )
        },
    ]
}

fn request(s: &Step) -> RateLimitRequest {
    RateLimitRequest {
        domain: "c".into(),
        hits_addend: s.hits,
        descriptors: s
            .descriptors
            .iter()
            .map(|D(entries, hits)| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: k.to_string(),
                        value: v.to_string(),
                    })
                    .collect(),
                limit: None,
                hits_addend: *hits,
            })
            .collect(),
    }
}

fn answer(resp: &RateLimitResponse) -> Vec<Expect> {
    resp.statuses
        .iter()
        .map(|s| Expect {
            code: s.code,
            limit: s
                .current_limit
                .as_ref()
                .map(|l| -> &'static str { Box::leak(l.name.clone().into_boxed_str()) }),
            remaining: s.limit_remaining,
            reset_s: s.duration_until_reset.map(|d| d.seconds),
        })
        .collect()
}

/// Runs every case against a fresh store of `kind` (its own namespace, so cases never share
/// counters).
async fn run_table(kind: StoreKind) {
    let backend = kind.name();
    for c in table() {
        let clock = ManualClock::new(T0 + c.start_us);
        let settings = Settings {
            count_rejected: c.count_rejected,
            ..Settings::default()
        };
        let limiter = limiter(c.yaml, settings, store(kind, &clock).await);
        for (i, s) in c.steps.iter().enumerate() {
            clock.advance(s.after_us);
            let resp = limiter
                .should_rate_limit(&request(s))
                .await
                .unwrap_or_else(|e| panic!("[{backend}] {} step {i}: {e:?}", c.name));
            assert_eq!(
                (resp.overall_code, answer(&resp)),
                (s.overall, s.expect.clone()),
                "[{backend}] {} — step {i}",
                c.name
            );
        }
    }
}

#[test]
fn every_store_conforms() {
    for_every_store(run_table);
}
