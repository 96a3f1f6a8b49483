//! Lua against Rust: random configs and random request sequences, the same on the memory store
//! (the Rust algorithms) and on a Redis store (the Lua script), with one injected clock. Every
//! answer must be identical — codes, deciding limits, remaining, waits — and so must the state
//! left behind, compared at the end by a check-only request for every descriptor used.
//!
//! Configs mix every algorithm, `shared`, `hierarchical`, `overdraft`, `quota_mode`,
//! `shadow_mode`, `replaces` and `unlimited`; requests mix several placement groups (so the
//! Redis store takes charges back after a denial), costs of 0, small and huge, request-side
//! overrides, `--count-rejected` and global shadow mode; the clock also steps backwards. The
//! requests run as on a serving thread, so a request's groups reach Redis as one batch.
//!
//! 256 cases per Redis kind. A failure prints the seed; `TOLLGATE_DIFF_SEED=<seed>` replays it
//! and `TOLLGATE_DIFF_CASES=<n>` runs more.

use std::fmt::Write as _;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use tollgate::base::clock::ManualClock;
use tollgate::pb::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;

use crate::support::kit::{limiter, memory_like, store_with, AnyStore, StoreKind};

const S: u64 = 1_000_000;
const T0: u64 = 1_800_000_000_000_000;
const MAX_HITS: u64 = u32::MAX as u64;

#[derive(Debug, Clone)]
struct LimitSpec {
    name: String,
    algorithm: &'static str,
    rpu: u32,
    unit: &'static str,
    window_ms: Option<u64>,
    burst: Option<u64>,
    overdraft: bool,
    shared: bool,
    replaces: Option<String>,
}

#[derive(Debug, Clone)]
struct RuleSpec {
    value: Option<&'static str>,
    limits: Vec<LimitSpec>,
    unlimited: bool,
    shadow: bool,
    quota: bool,
    hierarchical: bool,
    child: Option<LimitSpec>,
}

#[derive(Debug, Clone)]
struct Scenario {
    rules: Vec<RuleSpec>,
    count_rejected: bool,
    global_shadow: bool,
    start: u64,
    /// (clock step in µs, signed; request)
    steps: Vec<(i64, RateLimitRequest)>,
}

fn limit_spec(name: String) -> impl Strategy<Value = LimitSpec> {
    (
        prop_oneof![
            Just("fixed_window"),
            Just("sliding_window"),
            Just("token_bucket")
        ],
        1u32..=6,
        prop_oneof![Just("second"), Just("minute")],
        prop::option::weighted(0.3, 1u64..=40).prop_map(|w| w.map(|w| w * 100)),
        prop::option::weighted(0.5, 1u64..=8),
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.15, 0usize..8),
    )
        .prop_map(
            move |(algorithm, rpu, unit, window_ms, burst, overdraft, shared, replaces)| {
                LimitSpec {
                    name: name.clone(),
                    algorithm,
                    rpu,
                    unit,
                    window_ms,
                    burst: burst.filter(|_| algorithm == "token_bucket"),
                    overdraft,
                    shared,
                    replaces: replaces.map(|r| format!("n{r}")),
                }
            },
        )
}

fn rule_spec(i: usize) -> impl Strategy<Value = RuleSpec> {
    (
        prop_oneof![Just(None), Just(Some("a")), Just(Some("a*"))],
        prop::collection::vec(0..2usize, 0..=2),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.4),
    )
        .prop_flat_map(
            move |(value, limits, unlimited, shadow, quota, hierarchical, has_child)| {
                let limits: Vec<_> = limits
                    .iter()
                    .enumerate()
                    .map(|(j, _)| limit_spec(format!("n{}", 2 * i + j)))
                    .collect();
                let child = if has_child {
                    limit_spec(format!("c{i}")).prop_map(Some).boxed()
                } else {
                    Just(None).boxed()
                };
                (limits, child).prop_map(move |(limits, child)| RuleSpec {
                    value,
                    limits,
                    unlimited,
                    shadow,
                    quota,
                    hierarchical,
                    child,
                })
            },
        )
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    (
        0usize..4,
        prop_oneof![Just("a"), Just("ab"), Just("b")],
        prop::option::weighted(0.4, prop_oneof![Just("x"), Just("y")]),
        prop_oneof![
            3 => Just(None),
            2 => Just(Some(0u64)),
            3 => (1u64..=4).prop_map(Some),
            1 => (5u64..=MAX_HITS).prop_map(Some),
        ],
        prop::option::weighted(0.08, (1u32..=5, prop_oneof![Just(1i32), Just(2i32)])),
    )
        .prop_map(|(rule, value, child, hits, limit)| {
            let mut entries = vec![Entry {
                key: format!("k{rule}"),
                value: value.to_string(),
            }];
            if let Some(c) = child {
                entries.push(Entry {
                    key: "c".into(),
                    value: c.to_string(),
                });
            }
            RateLimitDescriptor {
                entries,
                limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                    requests_per_unit,
                    unit,
                }),
                hits_addend: hits,
            }
        })
}

fn step() -> impl Strategy<Value = (i64, RateLimitRequest)> {
    let clock = prop_oneof![
        4 => Just(0i64),
        3 => 0i64..300_000,
        2 => 0i64..5_000_000,
        1 => 60_000_000i64..61_000_000,
        1 => -2_000_000i64..0,
    ];
    (clock, prop::collection::vec(descriptor(), 1..=4), 0u32..=3).prop_map(
        |(dt, descriptors, hits_addend)| {
            (
                dt,
                RateLimitRequest {
                    domain: "diff".into(),
                    descriptors,
                    hits_addend,
                },
            )
        },
    )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (rule_spec(0), rule_spec(1), rule_spec(2), rule_spec(3)),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        0u64..3_600 * S,
        prop::collection::vec(step(), 1..=24),
    )
        .prop_map(
            |((r0, r1, r2, r3), count_rejected, global_shadow, start, steps)| Scenario {
                rules: vec![r0, r1, r2, r3],
                count_rejected,
                global_shadow,
                start,
                steps,
            },
        )
}

fn limit_yaml(l: &LimitSpec) -> String {
    let mut s = format!(
        "{{name: {}, unit: {}, requests_per_unit: {}, algorithm: {}",
        l.name, l.unit, l.rpu, l.algorithm
    );
    if let Some(w) = l.window_ms {
        let _ = write!(s, ", window: {w}ms");
    }
    if let Some(b) = l.burst {
        let _ = write!(s, ", burst: {b}");
    }
    for (flag, on) in [("overdraft", l.overdraft), ("shared", l.shared)] {
        if on {
            let _ = write!(s, ", {flag}: true");
        }
    }
    if let Some(r) = l.replaces.as_ref().filter(|r| **r != l.name) {
        let _ = write!(s, ", replaces: [{{name: {r}}}]");
    }
    s.push('}');
    s
}

fn yaml(domain: &str, rules: &[RuleSpec]) -> String {
    let mut y = format!("domain: {domain}\ndescriptors:\n");
    for (i, r) in rules.iter().enumerate() {
        let _ = writeln!(y, "  - key: k{i}");
        if let Some(v) = r.value {
            let _ = writeln!(y, "    value: \"{v}\"");
        }
        for (flag, on) in [
            ("shadow_mode", r.shadow),
            ("quota_mode", r.quota),
            ("hierarchical", r.hierarchical),
        ] {
            if on {
                let _ = writeln!(y, "    {flag}: true");
            }
        }
        if r.unlimited {
            y.push_str("    rate_limit: {unlimited: true}\n");
        } else if !r.limits.is_empty() {
            y.push_str("    rate_limits:\n");
            for l in &r.limits {
                let _ = writeln!(y, "      - {}", limit_yaml(l));
            }
        }
        if let Some(c) = &r.child {
            let _ = writeln!(
                y,
                "    descriptors:\n      - key: c\n        rate_limit: {}",
                limit_yaml(c)
            );
        }
    }
    y
}

/// Everything an answer says, as comparable text.
fn answer(r: &Result<RateLimitResponse, tollgate::service::error::CallError>) -> String {
    match r {
        Err(e) => format!("error {e:?}"),
        Ok(resp) => {
            let mut s = format!("overall {}", resp.overall_code);
            for st in &resp.statuses {
                let limit = st
                    .current_limit
                    .as_ref()
                    .map(|l| format!("{}:{}/{}", l.name, l.requests_per_unit, l.unit));
                let _ = write!(
                    s,
                    " | code {} limit {:?} remaining {} reset {:?}",
                    st.code,
                    limit,
                    st.limit_remaining,
                    st.duration_until_reset.map(|d| d.seconds)
                );
            }
            s
        }
    }
}

async fn run_both(
    sc: &Scenario,
    domain: &str,
    memory: &RateLimiter<AnyStore>,
    redis: &RateLimiter<AnyStore>,
    clock: &ManualClock,
) -> Result<(), String> {
    let mut now = T0 + sc.start;
    clock.set(now);
    for (i, (dt, req)) in sc.steps.iter().enumerate() {
        now = now.saturating_add_signed(*dt);
        clock.set(now);
        let req = &RateLimitRequest {
            domain: domain.to_string(),
            ..req.clone()
        };
        let m = answer(&memory.should_rate_limit(req).await);
        let r = answer(&redis.should_rate_limit(req).await);
        if m != r {
            return Err(format!(
                "step {i} at T0+{}µs: {req:?}\n    memory: {m}\n    redis:  {r}",
                now - T0
            ));
        }
    }
    // The state left behind: a check-only look at every descriptor used.
    let mut seen: Vec<RateLimitDescriptor> = Vec::new();
    for (_, req) in &sc.steps {
        for d in &req.descriptors {
            let check = RateLimitDescriptor {
                hits_addend: Some(0),
                ..d.clone()
            };
            if !seen.contains(&check) {
                seen.push(check);
            }
        }
    }
    for d in seen {
        let req = RateLimitRequest {
            domain: domain.to_string(),
            descriptors: vec![d],
            hits_addend: 0,
        };
        let m = answer(&memory.should_rate_limit(&req).await);
        let r = answer(&redis.should_rate_limit(&req).await);
        if m != r {
            return Err(format!(
                "final check-only at T0+{}µs: {req:?}\n    memory: {m}\n    redis:  {r}",
                now - T0
            ));
        }
    }
    Ok(())
}

/// What a comparison runs on: a Redis store of `kind` (the local over-limit cache off: it has
/// tests of its own) on one injected clock, and the runtime the requests run on.
struct Sides {
    /// Runs the Redis store's background tasks.
    _runtime: tokio::runtime::Runtime,
    clock: ManualClock,
    redis_store: std::sync::Arc<AnyStore>,
    /// A current-thread runtime, as a serving thread: a request's groups then leave as one
    /// batch of script calls (see src/store/redis/scripts/coalesce.rs), so the batch layout is held to
    /// Rust too (a lone group goes as a plain call).
    serving: tokio::runtime::Runtime,
}

fn sides(kind: StoreKind) -> Sides {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let clock = ManualClock::new(T0);
    let redis_store = runtime.block_on(store_with(kind, &clock, |s| s.local_cache_size = 0));
    let serving = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    Sides {
        _runtime: runtime,
        clock,
        redis_store,
        serving,
    }
}

fn differential(kind: StoreKind) {
    let seed: u64 = std::env::var("TOLLGATE_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let cases = std::env::var("TOLLGATE_DIFF_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    // One Redis store for every case (each case has a domain of its own, so no counter is
    // shared).
    let Sides {
        _runtime,
        clock,
        redis_store,
        serving,
    } = sides(kind);
    let case = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&scenario(), |sc| {
        let domain = format!(
            "d{}",
            case.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let text = yaml(&domain, &sc.rules);
        let settings = Settings {
            count_rejected: sc.count_rejected,
            global_shadow: sc.global_shadow,
            ..Settings::default()
        };
        serving.block_on(async {
            let memory = limiter(&text, settings.clone(), memory_like(kind, &clock).await);
            let redis = limiter(&text, settings.clone(), redis_store.clone());
            run_both(&sc, &domain, &memory, &redis, &clock)
                .await
                .map_err(|e| TestCaseError::fail(format!("{e}\nconfig:\n{text}")))
        })
    });
    if let Err(e) = result {
        panic!(
            "[{}] memory and Redis disagree (seed {seed}; replay with TOLLGATE_DIFF_SEED={seed}):\n{e}",
            kind.name()
        );
    }
}

#[test]
fn lua_and_rust_agree_on_a_single_redis() {
    differential(StoreKind::Redis);
}

#[test]
fn lua_and_rust_agree_on_a_redis_cluster() {
    differential(StoreKind::Cluster);
}

fn one(key: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: "a".into(),
        }],
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: String::new(),
        descriptors,
        hits_addend,
    }
}

/// Runs `steps` on both sides under a config of descriptor `t` with `limit`, and `gate`, an
/// hourly limit of 1: a request that names the gate after its first is denied, so what it
/// charged on `t` is refunded.
fn agree(kind: StoreKind, limit: &str, steps: Vec<(i64, RateLimitRequest)>) {
    let sc = Scenario {
        rules: Vec::new(),
        count_rejected: false,
        global_shadow: false,
        start: 0,
        steps,
    };
    let domain = "scripted";
    let text = format!(
        "domain: {domain}\ndescriptors:\n\
         \x20 - key: t\n\
         \x20   rate_limit: {limit}\n\
         \x20 - key: gate\n\
         \x20   rate_limit: {{name: gate, unit: hour, requests_per_unit: 1}}\n"
    );
    let Sides {
        _runtime,
        clock,
        redis_store,
        serving,
    } = sides(kind);
    serving
        .block_on(async {
            let memory = limiter(&text, Settings::default(), memory_like(kind, &clock).await);
            let redis = limiter(&text, Settings::default(), redis_store);
            run_both(&sc, domain, &memory, &redis, &clock).await
        })
        .unwrap_or_else(|e| panic!("[{}] memory and Redis disagree:\n{e}", kind.name()));
}

/// A sliding window that holds a full window of granules — one charge per 60 ms granule of a
/// minute, so 1,000 live entries — answers on Redis what it answers in Rust. The script reads
/// and writes a window's log a few entries at a time; this walks each of its paths at a size
/// the random cases never reach: forgetting from the front, merging into the newest entry, a
/// retry time deep in the log, half the window leaving at once (then the log is rewritten
/// without its forgotten entries), all of it leaving (it starts afresh), and refunds (the
/// gate), which the general path writes.
#[test]
fn lua_and_rust_agree_on_a_full_sliding_window() {
    const GRANULE_US: i64 = 60_000;
    let mut steps = Vec::new();
    for i in 0..2_600u32 {
        let after_us = match i {
            1_500 => 30_000_000,
            2_000 => 70_000_000,
            _ => GRANULE_US,
        };
        steps.push((after_us, request(vec![one("t")], 1 + i % 3)));
        if i % 7 == 0 {
            steps.push((1_000, request(vec![one("t")], 1)));
        }
        if i >= 2_200 && i % 50 == 0 {
            steps.push((0, request(vec![one("t"), one("gate")], 1)));
        }
        if i % 100 == 99 {
            // Denied (the window holds over 100): it fits once all but 100 units have left.
            steps.push((0, request(vec![one("t")], 2_900)));
        }
    }
    let limit = "{name: sw, unit: minute, requests_per_unit: 3000, algorithm: sliding_window}";
    for kind in [StoreKind::Redis, StoreKind::Cluster] {
        agree(kind, limit, steps.clone());
    }
}

/// A token bucket's history (the debts its last 8 charges found, which refunds read): one
/// request charges the bucket up to 12 times (a descriptor named again and again), and the
/// gate then takes every one of them back, oldest first, while time moves so that debts
/// both grow and shrink between requests. The random cases rarely charge one key more than
/// twice in a request, so they seldom fill the history or drop from it.
#[test]
fn lua_and_rust_agree_on_a_token_bucket_history() {
    let mut steps = Vec::new();
    for i in 0..400u32 {
        let copies = 1 + (i % 12) as usize;
        let mut descriptors = vec![one("t"); copies];
        if i % 3 != 0 {
            descriptors.push(one("gate"));
        }
        let after_us = match i % 5 {
            0 => 250_000,
            1 | 2 => 37_000,
            _ => 3_000,
        };
        steps.push((after_us, request(descriptors, 1 + i % 4)));
    }
    let limit =
        "{name: tb, unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 300}";
    for kind in [StoreKind::Redis, StoreKind::Cluster] {
        agree(kind, limit, steps.clone());
    }
}
