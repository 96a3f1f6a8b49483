//! envoyproxy/ratelimit's matching and answering semantics as a table, driven through
//! `RateLimiter::should_rate_limit` on every store of the kit with a hand-driven clock.
//!
//! Each case is a config, service settings and a script of steps: send a request (ignoring
//! the answer), check a request's answer, or move the clock.

use std::borrow::Cow;

use tollgate::base::clock::ManualClock;
use tollgate::limit::unit::Unit;
use tollgate::pb::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::service::error::CallError;
use tollgate::service::settings::Settings;

use crate::support::kit::{for_every_store, limiter, store, StoreKind};

const SECOND_US: u64 = 1_000_000;
/// A minute boundary (1_699_999_980 s is a multiple of 60) plus 15 s: every window of a
/// minute or less stays open for the whole of a case that does not move the clock.
const MINUTE_START_US: u64 = 1_699_999_980 * SECOND_US;
const START_US: u64 = MINUTE_START_US + 15 * SECOND_US;

// ---- requests ----

fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

/// A descriptor with its own `hits_addend`.
fn desc_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(hits),
        ..desc(entries)
    }
}

/// A descriptor with a `limit` override (`unit` as the proto number, 0 = UNKNOWN).
fn desc_override(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..desc(entries)
    }
}

fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

fn req_hits(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        hits_addend: hits,
        ..req(domain, descriptors)
    }
}

// ---- expected answers ----

/// One descriptor's expected status.
#[derive(Debug, Clone, PartialEq)]
struct Want {
    code: Code,
    /// `(name, requests_per_unit, unit)` of `current_limit`.
    limit: Option<(Cow<'static, str>, u32, Unit)>,
    remaining: u32,
}

/// OK with no limit: the descriptor matched nothing.
const NO_LIMIT: Want = Want {
    code: Code::Ok,
    limit: None,
    remaining: 0,
};

/// `unlimited: true`.
const UNLIMITED: Want = Want {
    code: Code::Ok,
    limit: None,
    remaining: u32::MAX,
};

fn ok(name: &'static str, rpu: u32, unit: Unit, remaining: u32) -> Want {
    Want {
        code: Code::Ok,
        limit: Some((Cow::Borrowed(name), rpu, unit)),
        remaining,
    }
}

fn over(name: &'static str, rpu: u32, unit: Unit) -> Want {
    Want {
        code: Code::OverLimit,
        limit: Some((Cow::Borrowed(name), rpu, unit)),
        // An OVER_LIMIT status always reports 0 left (the reporting rule).
        remaining: 0,
    }
}

enum Step {
    /// Send the request `n` times; each must succeed.
    Send(RateLimitRequest, usize),
    /// Send once and compare the overall code and every status.
    Expect(RateLimitRequest, Code, Vec<Want>),
    /// Send once; the call must fail with INVALID_ARGUMENT containing this text.
    Reject(RateLimitRequest, &'static str),
    /// Move the clock forward.
    Advance(u64),
}

use Step::{Advance, Reject};

fn send(r: RateLimitRequest, n: usize) -> Step {
    Step::Send(r, n)
}

fn expect(r: RateLimitRequest, overall: Code, statuses: Vec<Want>) -> Step {
    Step::Expect(r, overall, statuses)
}

struct Case {
    name: &'static str,
    yaml: &'static str,
    settings: Settings,
    steps: Vec<Step>,
}

fn case(name: &'static str, yaml: &'static str, steps: Vec<Step>) -> Case {
    Case {
        name,
        yaml,
        settings: Settings::default(),
        steps,
    }
}

fn case_with(name: &'static str, yaml: &'static str, settings: Settings, steps: Vec<Step>) -> Case {
    Case {
        name,
        yaml,
        settings,
        steps,
    }
}

// ---- running ----

fn got_status(resp: &RateLimitResponse) -> Vec<Want> {
    resp.statuses
        .iter()
        .map(|s| Want {
            code: Code::try_from(s.code).unwrap_or(Code::Unknown),
            limit: s.current_limit.as_ref().map(|l| {
                let unit = Unit::from_proto(l.unit).unwrap_or_else(|| panic!("unit {}", l.unit));
                (Cow::Owned(l.name.clone()), l.requests_per_unit, unit)
            }),
            remaining: s.limit_remaining,
        })
        .collect()
}

/// Runs a case's script on a fresh store of `kind`; returns a description of each mismatch.
async fn run(kind: StoreKind, case: Case) -> Vec<String> {
    let clock = ManualClock::new(START_US);
    let rl = limiter(case.yaml, case.settings, store(kind, &clock).await);
    let mut failures = Vec::new();
    for (i, step) in case.steps.into_iter().enumerate() {
        let at = format!("{}: step {i}", case.name);
        match step {
            Step::Send(r, n) => {
                for _ in 0..n {
                    if let Err(e) = rl.should_rate_limit(&r).await {
                        failures.push(format!("{at}: send failed: {e:?}"));
                    }
                }
            }
            Step::Expect(r, overall, want) => match rl.should_rate_limit(&r).await {
                Err(e) => failures.push(format!("{at}: failed: {e:?}")),
                Ok(resp) => {
                    let got_overall = Code::try_from(resp.overall_code).unwrap_or(Code::Unknown);
                    let got = got_status(&resp);
                    if got_overall != overall || got != want {
                        failures.push(format!(
                            "{at}:\n    got  {got_overall:?} {got:?}\n    want {overall:?} {want:?}"
                        ));
                    }
                }
            },
            Reject(r, text) => match rl.should_rate_limit(&r).await {
                Err(e @ CallError::Invalid(_)) if e.to_string().contains(text) => {}
                other => failures.push(format!(
                    "{at}: got {other:?}, want INVALID_ARGUMENT containing {text:?}"
                )),
            },
            Advance(us) => clock.advance(us),
        }
    }
    failures
}

async fn run_all(kind: StoreKind, cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in cases {
        failures.extend(run(kind, c).await);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

use Code::{Ok as OK, OverLimit as OVER};
use Unit::{Hour as HOUR, Minute as MINUTE, Second as SECOND};

// ---- configs ----

const PRECEDENCE: &str = "
domain: d
descriptors:
  - key: k
    value: foo
    rate_limit: {name: exact, unit: minute, requests_per_unit: 1}
  - key: k
    value: foo*
    rate_limit: {name: foo_prefix, unit: minute, requests_per_unit: 2}
  - key: k
    value: fo*
    rate_limit: {name: fo_prefix, unit: minute, requests_per_unit: 3}
  - key: k
    rate_limit: {name: any, unit: minute, requests_per_unit: 4}
";

const WILDCARDS_SHORT_FIRST: &str = "
domain: d
descriptors:
  - key: k
    value: fo*
    rate_limit: {name: fo_prefix, unit: minute, requests_per_unit: 3}
  - key: k
    value: foo*
    rate_limit: {name: foo_prefix, unit: minute, requests_per_unit: 2}
";

const STARS_ANYWHERE: &str = "
domain: d
descriptors:
  - key: k
    value: bar*b
    rate_limit: {name: bar_b, unit: minute, requests_per_unit: 5}
  - key: k
    value: foo*bar*baz
    rate_limit: {name: foo_bar_baz, unit: minute, requests_per_unit: 5}
";

const TWO_LEVELS: &str = "
domain: d
descriptors:
  - key: k1
    value: a
    descriptors:
      - key: k2
        rate_limit: {name: a_child, unit: minute, requests_per_unit: 1}
  - key: k1
    value: b
    rate_limit: {name: b_parent, unit: hour, requests_per_unit: 5}
    descriptors:
      - key: k2
        value: x
        rate_limit: {name: b_child, unit: minute, requests_per_unit: 2}
  - key: k1
    descriptors:
      - key: k2
        rate_limit: {name: any_child, unit: minute, requests_per_unit: 3}
";

const KEY_ONLY_1: &str = "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
";

const KEY_ONLY_5: &str = "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
";

const HIERARCHY_UNDER_OVERRIDE: &str = "
domain: d
descriptors:
  - key: tenant
    hierarchical: true
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 2}
    descriptors:
      - key: model
        rate_limit: {name: model, unit: minute, requests_per_unit: 5}
";

const WILDCARD_NOT_SHARED: &str = "
domain: d
descriptors:
  - key: k
    value: fo*
    rate_limit: {unit: minute, requests_per_unit: 1}
";

const WILDCARD_SHARED: &str = "
domain: d
descriptors:
  - key: k
    value: fo*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: k2
        rate_limit: {name: child, unit: minute, requests_per_unit: 2}
";

const UNLIMITED_CONFIG: &str = "
domain: d
descriptors:
  - key: k
    value: vip
    rate_limit: {unlimited: true}
  - key: k
    rate_limit: {name: per_k, unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit:
      unlimited: true
      replaces: [{name: per_k}]
";

const REPLACES: &str = "
domain: d
descriptors:
  - key: a
    rate_limit: {name: X, unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit:
      name: Y
      unit: minute
      requests_per_unit: 3
      replaces: [{name: X}]
";

const SHADOW: &str = "
domain: d
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 1}
  - key: k
    rate_limit: {name: enforced, unit: minute, requests_per_unit: 1}
";

const QUOTA: &str = "
domain: d
descriptors:
  - key: q
    quota_mode: true
    rate_limit: {name: quota, unit: minute, requests_per_unit: 1}
  - key: k
    rate_limit: {name: plain, unit: minute, requests_per_unit: 1}
";

const TWO_LIMITS: &str = "
domain: d
descriptors:
  - key: big
    rate_limit: {name: big, unit: minute, requests_per_unit: 5}
  - key: small
    rate_limit: {name: small, unit: minute, requests_per_unit: 1}
";

const SEPARATORS: &str = "
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b_c
        rate_limit: {name: a_then_b_c, unit: minute, requests_per_unit: 1}
  - key: a_b
    descriptors:
      - key: c
        rate_limit: {name: a_b_then_c, unit: minute, requests_per_unit: 1}
  - key: x
    descriptors:
      - key: y
        rate_limit: {name: x_then_y, unit: minute, requests_per_unit: 1}
";

const NUMERIC: &str = "
domain: d
descriptors:
  - key: code
    value: 200
    rate_limit: {name: ok_responses, unit: second, requests_per_unit: 1}
";

fn cases() -> Vec<Case> {
    // A request under HIERARCHY_UNDER_OVERRIDE's tenant rule, with a limit override.
    let through_override = || {
        req(
            "d",
            vec![desc_override(
                &[("tenant", "a"), ("model", "m")],
                100,
                Unit::Hour.proto(),
            )],
        )
    };
    vec![
        case(
            "exact beats wildcard beats key-only; the first matching wildcard wins",
            PRECEDENCE,
            vec![expect(
                req(
                    "d",
                    vec![
                        desc(&[("k", "foo")]),
                        desc(&[("k", "foox")]),
                        desc(&[("k", "fox")]),
                        desc(&[("k", "bar")]),
                    ],
                ),
                OK,
                vec![
                    ok("exact", 1, MINUTE, 0),
                    ok("foo_prefix", 2, MINUTE, 1),
                    ok("fo_prefix", 3, MINUTE, 2),
                    ok("any", 4, MINUTE, 3),
                ],
            )],
        ),
        case(
            "wildcards are tried in config order, not by length",
            WILDCARDS_SHORT_FIRST,
            vec![expect(
                req(
                    "d",
                    vec![
                        desc(&[("k", "foox")]),
                        // A value equal to the prefix matches it.
                        desc(&[("k", "fo")]),
                        desc(&[("k", "f")]),
                    ],
                ),
                OK,
                vec![
                    ok("fo_prefix", 3, MINUTE, 2),
                    ok("fo_prefix", 3, MINUTE, 2),
                    NO_LIMIT,
                ],
            )],
        ),
        case(
            "a star stands anywhere in a value, more than once, for any run of characters",
            STARS_ANYWHERE,
            vec![expect(
                req(
                    "d",
                    vec![
                        desc(&[("k", "barab")]),
                        desc(&[("k", "bar123b")]),
                        desc(&[("k", "barb")]),
                        desc(&[("k", "bar")]),
                        desc(&[("k", "foo-bar-baz")]),
                        desc(&[("k", "foobarbaz")]),
                        desc(&[("k", "foo-baz-bar")]),
                    ],
                ),
                OK,
                vec![
                    ok("bar_b", 5, MINUTE, 4),
                    ok("bar_b", 5, MINUTE, 4),
                    ok("bar_b", 5, MINUTE, 4),
                    NO_LIMIT,
                    ok("foo_bar_baz", 5, MINUTE, 4),
                    ok("foo_bar_baz", 5, MINUTE, 4),
                    NO_LIMIT,
                ],
            )],
        ),
        case(
            "a limit applies only at the request's depth",
            TWO_LEVELS,
            vec![expect(
                req(
                    "d",
                    vec![
                        // Shallower than the rule with the limit.
                        desc(&[("k1", "a")]),
                        // Exactly deep enough.
                        desc(&[("k1", "a"), ("k2", "v")]),
                        // Deeper than the config.
                        desc(&[("k1", "a"), ("k2", "v"), ("k3", "w")]),
                        // A parent rule with its own limit and children.
                        desc(&[("k1", "b")]),
                        desc(&[("k1", "b"), ("k2", "x")]),
                    ],
                ),
                OK,
                vec![
                    NO_LIMIT,
                    ok("a_child", 1, MINUTE, 0),
                    NO_LIMIT,
                    ok("b_parent", 5, HOUR, 4),
                    ok("b_child", 2, MINUTE, 1),
                ],
            )],
        ),
        case(
            "no backtracking to the key-only rule once an exact value matched",
            TWO_LEVELS,
            vec![expect(
                req(
                    "d",
                    vec![
                        // k1=b matches exactly; its child only knows k2=x.
                        desc(&[("k1", "b"), ("k2", "y")]),
                        // k1=c falls to the key-only rule, whose child takes any k2.
                        desc(&[("k1", "c"), ("k2", "y")]),
                        // A key the child level does not know.
                        desc(&[("k1", "c"), ("other", "y")]),
                    ],
                ),
                OK,
                vec![NO_LIMIT, ok("any_child", 3, MINUTE, 2), NO_LIMIT],
            )],
        ),
        case(
            "key-only rule counts each value separately",
            KEY_ONLY_1,
            vec![
                expect(
                    req("d", vec![desc(&[("k", "a")])]),
                    OK,
                    vec![ok("", 1, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "b")])]),
                    OK,
                    vec![ok("", 1, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "a")])]),
                    OVER,
                    vec![over("", 1, MINUTE)],
                ),
            ],
        ),
        case(
            "a wildcard without share_threshold counts each value separately",
            WILDCARD_NOT_SHARED,
            vec![
                expect(
                    req("d", vec![desc(&[("k", "foo1")])]),
                    OK,
                    vec![ok("", 1, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "foo2")])]),
                    OK,
                    vec![ok("", 1, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "foo1")])]),
                    OVER,
                    vec![over("", 1, MINUTE)],
                ),
            ],
        ),
        case(
            "share_threshold: every value matching the wildcard shares one counter",
            WILDCARD_SHARED,
            vec![
                expect(
                    req("d", vec![desc(&[("k", "foo1")])]),
                    OK,
                    vec![ok("", 2, MINUTE, 1)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "fox")])]),
                    OK,
                    vec![ok("", 2, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "fo")])]),
                    OVER,
                    vec![over("", 2, MINUTE)],
                ),
                // A value the wildcard does not match has no rule at all.
                expect(req("d", vec![desc(&[("k", "bar")])]), OK, vec![NO_LIMIT]),
            ],
        ),
        case(
            "share_threshold: limits below the wildcard share across its values too",
            WILDCARD_SHARED,
            vec![
                expect(
                    req("d", vec![desc(&[("k", "foo1"), ("k2", "x")])]),
                    OK,
                    vec![ok("child", 2, MINUTE, 1)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "foo2"), ("k2", "x")])]),
                    OK,
                    vec![ok("child", 2, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("k", "foo3"), ("k2", "x")])]),
                    OVER,
                    vec![over("child", 2, MINUTE)],
                ),
                // The child level is key-only: another child value has its own counter.
                expect(
                    req("d", vec![desc(&[("k", "foo3"), ("k2", "y")])]),
                    OK,
                    vec![ok("child", 2, MINUTE, 1)],
                ),
            ],
        ),
        case(
            "unlimited answers OK with the maximum remaining and no limit",
            UNLIMITED_CONFIG,
            vec![
                send(req("d", vec![desc(&[("k", "vip")])]), 5),
                expect(req("d", vec![desc(&[("k", "vip")])]), OK, vec![UNLIMITED]),
                // Exact beats key-only: other values keep the limit.
                send(req("d", vec![desc(&[("k", "other")])]), 1),
                expect(
                    req("d", vec![desc(&[("k", "other")])]),
                    OVER,
                    vec![over("per_k", 1, MINUTE)],
                ),
            ],
        ),
        case(
            "an unlimited rule's replaces removes the named limit from the request",
            UNLIMITED_CONFIG,
            vec![
                send(req("d", vec![desc(&[("k", "a")])]), 1),
                expect(
                    req("d", vec![desc(&[("k", "a")]), desc(&[("free", "1")])]),
                    OK,
                    vec![NO_LIMIT, UNLIMITED],
                ),
            ],
        ),
        case(
            "replaces: a limit named by another descriptor's replaces is not applied",
            REPLACES,
            vec![
                // Alone, X applies.
                expect(
                    req("d", vec![desc(&[("a", "1")])]),
                    OK,
                    vec![ok("X", 1, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("a", "1")])]),
                    OVER,
                    vec![over("X", 1, MINUTE)],
                ),
                // With b, X is replaced by Y: a is unlimited by X and nothing charges it.
                expect(
                    req("d", vec![desc(&[("a", "1")]), desc(&[("b", "1")])]),
                    OK,
                    vec![NO_LIMIT, ok("Y", 3, MINUTE, 2)],
                ),
                expect(
                    req("d", vec![desc(&[("a", "2")]), desc(&[("b", "1")])]),
                    OK,
                    vec![NO_LIMIT, ok("Y", 3, MINUTE, 1)],
                ),
                expect(
                    req("d", vec![desc(&[("a", "2")])]),
                    OK,
                    vec![ok("X", 1, MINUTE, 0)],
                ),
            ],
        ),
        case(
            "shadow_mode rule: over its limit still answers OK",
            SHADOW,
            vec![
                send(req("d", vec![desc(&[("s", "1")])]), 3),
                expect(
                    req("d", vec![desc(&[("s", "1")])]),
                    OK,
                    vec![ok("shadowed", 1, MINUTE, 0)],
                ),
                // Other rules are enforced.
                send(req("d", vec![desc(&[("k", "1")])]), 1),
                expect(
                    req("d", vec![desc(&[("s", "1")]), desc(&[("k", "1")])]),
                    OVER,
                    vec![ok("shadowed", 1, MINUTE, 0), over("enforced", 1, MINUTE)],
                ),
            ],
        ),
        case_with(
            "global shadow: real statuses, overall OK",
            KEY_ONLY_1,
            Settings {
                global_shadow: true,
                ..Settings::default()
            },
            vec![
                send(req("d", vec![desc(&[("k", "a")])]), 1),
                // b is answered (and counted) as enforcement would: the request is denied
                // underneath, so b is not charged.
                expect(
                    req("d", vec![desc(&[("k", "a")]), desc(&[("k", "b")])]),
                    OK,
                    vec![over("", 1, MINUTE), ok("", 1, MINUTE, 1)],
                ),
            ],
        ),
        case(
            "quota_mode: over only when every quota descriptor is over",
            QUOTA,
            vec![
                send(req("d", vec![desc(&[("q", "a")])]), 1),
                // a is over, b has room: OK, and b is charged.
                expect(
                    req("d", vec![desc(&[("q", "a")]), desc(&[("q", "b")])]),
                    OK,
                    vec![over("quota", 1, MINUTE), ok("quota", 1, MINUTE, 0)],
                ),
                expect(
                    req("d", vec![desc(&[("q", "a")]), desc(&[("q", "b")])]),
                    OVER,
                    vec![over("quota", 1, MINUTE), over("quota", 1, MINUTE)],
                ),
            ],
        ),
        case(
            "quota_mode: a non-quota descriptor over denies; a quota one over does not",
            QUOTA,
            vec![
                send(req("d", vec![desc(&[("q", "a")])]), 1),
                expect(
                    req(
                        "d",
                        vec![
                            desc(&[("q", "a")]),
                            desc(&[("q", "b")]),
                            desc(&[("k", "1")]),
                        ],
                    ),
                    OK,
                    vec![
                        over("quota", 1, MINUTE),
                        ok("quota", 1, MINUTE, 0),
                        ok("plain", 1, MINUTE, 0),
                    ],
                ),
                // The only quota descriptor being over is every quota descriptor being over.
                expect(
                    req("d", vec![desc(&[("q", "a")]), desc(&[("k", "2")])]),
                    OVER,
                    vec![over("quota", 1, MINUTE), ok("plain", 1, MINUTE, 1)],
                ),
                expect(
                    req("d", vec![desc(&[("q", "c")]), desc(&[("k", "1")])]),
                    OVER,
                    vec![ok("quota", 1, MINUTE, 1), over("plain", 1, MINUTE)],
                ),
            ],
        ),
        case(
            "unknown domain: OK with no limit for every descriptor",
            KEY_ONLY_1,
            vec![
                send(req("elsewhere", vec![desc(&[("k", "a")])]), 3),
                expect(
                    req("elsewhere", vec![desc(&[("k", "a")]), desc(&[("z", "1")])]),
                    OK,
                    vec![NO_LIMIT, NO_LIMIT],
                ),
            ],
        ),
        case(
            "a descriptor matching nothing: OK with no limit",
            PRECEDENCE,
            vec![expect(
                req(
                    "d",
                    vec![
                        desc(&[("unknown", "foo")]),
                        desc(&[("k", "foo"), ("deeper", "x")]),
                    ],
                ),
                OK,
                vec![NO_LIMIT, NO_LIMIT],
            )],
        ),
        case(
            "a limit override replaces the config's limit in a known domain",
            KEY_ONLY_5,
            vec![
                expect(
                    req(
                        "d",
                        vec![desc_override(&[("k", "a")], 2, Unit::Second.proto())],
                    ),
                    OK,
                    vec![ok("", 2, SECOND, 1)],
                ),
                expect(
                    req(
                        "d",
                        vec![desc_override(&[("k", "a")], 2, Unit::Second.proto())],
                    ),
                    OK,
                    vec![ok("", 2, SECOND, 0)],
                ),
                expect(
                    req(
                        "d",
                        vec![desc_override(&[("k", "a")], 2, Unit::Second.proto())],
                    ),
                    OVER,
                    vec![over("", 2, SECOND)],
                ),
                // It applies even where the config has no rule.
                expect(
                    req(
                        "d",
                        vec![desc_override(&[("nope", "a")], 7, Unit::Hour.proto())],
                    ),
                    OK,
                    vec![ok("", 7, HOUR, 6)],
                ),
            ],
        ),
        case(
            "a limit override replaces the matched rule's limits, not a hierarchical parent's",
            HIERARCHY_UNDER_OVERRIDE,
            vec![
                expect(through_override(), OK, vec![ok("tenant", 2, MINUTE, 1)]),
                expect(through_override(), OK, vec![ok("tenant", 2, MINUTE, 0)]),
                expect(through_override(), OVER, vec![over("tenant", 2, MINUTE)]),
            ],
        ),
        case(
            "a limit override is ignored in an unknown domain",
            KEY_ONLY_5,
            vec![
                send(
                    req(
                        "elsewhere",
                        vec![desc_override(&[("k", "a")], 1, Unit::Second.proto())],
                    ),
                    3,
                ),
                expect(
                    req(
                        "elsewhere",
                        vec![desc_override(&[("k", "a")], 1, Unit::Second.proto())],
                    ),
                    OK,
                    vec![NO_LIMIT],
                ),
            ],
        ),
        case(
            "a bad limit override is INVALID_ARGUMENT",
            KEY_ONLY_5,
            vec![
                Reject(
                    req("d", vec![desc_override(&[("k", "a")], 5, 0)]),
                    "limit override has unit UNKNOWN",
                ),
                Reject(
                    req(
                        "d",
                        vec![desc(&[("k", "b")]), desc_override(&[("k", "a")], 5, 99)],
                    ),
                    "descriptor 1: limit override has unit 99",
                ),
                Reject(
                    req(
                        "d",
                        vec![desc_override(&[("k", "a")], 0, Unit::Minute.proto())],
                    ),
                    "requests_per_unit of at least 1",
                ),
                // Nothing was charged by the rejected calls.
                expect(
                    req("d", vec![desc(&[("k", "b")])]),
                    OK,
                    vec![ok("", 5, MINUTE, 4)],
                ),
            ],
        ),
        case(
            "cost: the request's hits_addend, at least 1",
            KEY_ONLY_5,
            vec![
                expect(
                    req_hits("d", vec![desc(&[("k", "a")])], 3),
                    OK,
                    vec![ok("", 5, MINUTE, 2)],
                ),
                // 3 more do not fit: denied, nothing charged.
                expect(
                    req_hits("d", vec![desc(&[("k", "a")])], 3),
                    OVER,
                    vec![over("", 5, MINUTE)],
                ),
                // hits_addend 0 means 1.
                expect(
                    req_hits("d", vec![desc(&[("k", "a")])], 0),
                    OK,
                    vec![ok("", 5, MINUTE, 1)],
                ),
            ],
        ),
        case(
            "cost: a descriptor's hits_addend wins over the request's",
            KEY_ONLY_5,
            vec![
                expect(
                    req_hits(
                        "d",
                        vec![desc_hits(&[("k", "a")], 1), desc(&[("k", "b")])],
                        4,
                    ),
                    OK,
                    vec![ok("", 5, MINUTE, 4), ok("", 5, MINUTE, 1)],
                ),
                expect(
                    req_hits("d", vec![desc_hits(&[("k", "a")], 4)], 1),
                    OK,
                    vec![ok("", 5, MINUTE, 0)],
                ),
            ],
        ),
        case(
            "cost: a descriptor hits_addend of 0 only checks, over exactly when nothing is left",
            KEY_ONLY_5,
            vec![
                expect(
                    req("d", vec![desc_hits(&[("k", "a")], 0)]),
                    OK,
                    vec![ok("", 5, MINUTE, 5)],
                ),
                send(req_hits("d", vec![desc(&[("k", "a")])], 4), 1),
                expect(
                    req("d", vec![desc_hits(&[("k", "a")], 0)]),
                    OK,
                    vec![ok("", 5, MINUTE, 1)],
                ),
                expect(
                    req("d", vec![desc_hits(&[("k", "a")], 0)]),
                    OK,
                    vec![ok("", 5, MINUTE, 1)],
                ),
                send(req("d", vec![desc(&[("k", "a")])]), 1),
                expect(
                    req("d", vec![desc_hits(&[("k", "a")], 0)]),
                    OVER,
                    vec![over("", 5, MINUTE)],
                ),
            ],
        ),
        case(
            "all-or-nothing: a denied request charges none of its descriptors",
            TWO_LIMITS,
            vec![
                send(
                    req("d", vec![desc(&[("big", "1")]), desc(&[("small", "1")])]),
                    1,
                ),
                expect(
                    req("d", vec![desc(&[("big", "1")]), desc(&[("small", "1")])]),
                    OVER,
                    vec![ok("big", 5, MINUTE, 4), over("small", 1, MINUTE)],
                ),
                expect(
                    req("d", vec![desc(&[("big", "1")])]),
                    OK,
                    vec![ok("big", 5, MINUTE, 3)],
                ),
            ],
        ),
        case_with(
            "count_rejected: a denied request charges every descriptor",
            TWO_LIMITS,
            Settings {
                count_rejected: true,
                ..Settings::default()
            },
            vec![
                send(
                    req("d", vec![desc(&[("big", "1")]), desc(&[("small", "1")])]),
                    2,
                ),
                expect(
                    req("d", vec![desc(&[("big", "1")])]),
                    OK,
                    vec![ok("big", 5, MINUTE, 2)],
                ),
            ],
        ),
        case_with(
            "count_rejected: a check-only descriptor at exactly its limit is OK, past it OVER",
            KEY_ONLY_5,
            Settings {
                count_rejected: true,
                ..Settings::default()
            },
            vec![
                send(req("d", vec![desc(&[("k", "a")])]), 5),
                expect(
                    req("d", vec![desc_hits(&[("k", "a")], 0)]),
                    OK,
                    vec![ok("", 5, MINUTE, 0)],
                ),
                send(req("d", vec![desc(&[("k", "a")])]), 1),
                expect(
                    req("d", vec![desc_hits(&[("k", "a")], 0)]),
                    OVER,
                    vec![over("", 5, MINUTE)],
                ),
            ],
        ),
        case(
            "keys do not collide across entry boundaries",
            SEPARATORS,
            vec![expect(
                req(
                    "d",
                    vec![
                        // envoyproxy/ratelimit would join both into `d_a_b_b_c_w_`.
                        desc(&[("a", "b"), ("b_c", "w")]),
                        desc(&[("a_b", "b"), ("c", "w")]),
                        // The value carries what looks like the next entry.
                        desc(&[("x", "1_y_2"), ("y", "3")]),
                        desc(&[("x", "1"), ("y", "2_y_3")]),
                        // ...or tollgate's own separators.
                        desc(&[("x", "1}|y=2"), ("y", "3")]),
                        desc(&[("x", "1"), ("y", "2}|y=3")]),
                        desc(&[("x", "1|y=2"), ("y", "3")]),
                    ],
                ),
                OK,
                vec![
                    ok("a_then_b_c", 1, MINUTE, 0),
                    ok("a_b_then_c", 1, MINUTE, 0),
                    ok("x_then_y", 1, MINUTE, 0),
                    ok("x_then_y", 1, MINUTE, 0),
                    ok("x_then_y", 1, MINUTE, 0),
                    ok("x_then_y", 1, MINUTE, 0),
                    ok("x_then_y", 1, MINUTE, 0),
                ],
            )],
        ),
        case(
            "values with key syntax or escapes count separately",
            KEY_ONLY_1,
            vec![expect(
                req(
                    "d",
                    [
                        "a{b", "a}b", "a|b", "a=b", "a*b", "a%b", "a%7Bb", "a%257Bb", "*", "%2A",
                        "ab",
                    ]
                    .iter()
                    .map(|v| desc(&[("k", v)]))
                    .collect(),
                ),
                OK,
                vec![ok("", 1, MINUTE, 0); 11],
            )],
        ),
        case(
            "a numeric value in the config matches its text",
            NUMERIC,
            vec![expect(
                req(
                    "d",
                    vec![desc(&[("code", "200")]), desc(&[("code", "201")])],
                ),
                OK,
                vec![ok("ok_responses", 1, SECOND, 0), NO_LIMIT],
            )],
        ),
        case(
            "fixed windows reset at the epoch-aligned boundary",
            KEY_ONLY_1,
            vec![
                send(req("d", vec![desc(&[("k", "a")])]), 1),
                Advance(44 * SECOND_US),
                expect(
                    req("d", vec![desc(&[("k", "a")])]),
                    OVER,
                    vec![over("", 1, MINUTE)],
                ),
                // 45 s after the start is the next minute.
                Advance(SECOND_US),
                expect(
                    req("d", vec![desc(&[("k", "a")])]),
                    OK,
                    vec![ok("", 1, MINUTE, 0)],
                ),
            ],
        ),
    ]
}

#[test]
fn matching_table_on_every_store() {
    for_every_store(|kind| run_all(kind, cases()));
}

/// `duration_until_reset` is the rest of the epoch-aligned window, not a full window from the
/// first hit.
async fn fixed_window_reset_is_epoch_aligned(kind: StoreKind) {
    let clock = ManualClock::new(START_US);
    let rl = limiter(KEY_ONLY_1, Settings::default(), store(kind, &clock).await);
    let r = req("d", vec![desc(&[("k", "a")])]);
    let reset_secs = |resp: &RateLimitResponse| {
        resp.statuses[0]
            .duration_until_reset
            .as_ref()
            .map(|d| (d.seconds, d.nanos))
    };

    let first = rl.should_rate_limit(&r).await.expect("first");
    assert_eq!(first.overall_code, Code::Ok as i32);
    assert_eq!(reset_secs(&first), Some((45, 0)));

    clock.advance(30 * SECOND_US);
    let denied = rl.should_rate_limit(&r).await.expect("denied");
    assert_eq!(denied.overall_code, Code::OverLimit as i32);
    assert_eq!(reset_secs(&denied), Some((15, 0)));

    // One microsecond before the boundary: still the same window.
    clock.set(MINUTE_START_US + 60 * SECOND_US - 1);
    let last = rl.should_rate_limit(&r).await.expect("last");
    assert_eq!(last.overall_code, Code::OverLimit as i32);
    assert_eq!(reset_secs(&last), Some((1, 0)));

    clock.set(MINUTE_START_US + 60 * SECOND_US);
    let next = rl.should_rate_limit(&r).await.expect("next window");
    assert_eq!(next.overall_code, Code::Ok as i32);
    assert_eq!(reset_secs(&next), Some((60, 0)));
}

#[test]
fn fixed_window_reset_is_epoch_aligned_on_every_store() {
    for_every_store(fixed_window_reset_is_epoch_aligned);
}
