//! Usage domains (`--usage-domains`), on every store: a plain envoyproxy/ratelimit config in a
//! usage domain answers exactly as the same config with `overdraft: true` on every limit (for
//! every algorithm, step by step over a seeded run of checks and charges), so Envoy's LLM
//! token pattern stops a tenant at its budget; a caller's limit override there is an
//! overdraft limit too; outside usage domains a charge that does not fit charges nothing.

use tollgate::base::clock::ManualClock;
use tollgate::config::load::LoadOptions;
use tollgate::config::usage::UsageDomains;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::RateLimitResponse;
use tollgate::service::settings::Settings;

use crate::support::kit::{for_every_store, limiter_with, store, StoreKind};
use crate::support::server::{descriptor, request, with_override, OK, OVER_LIMIT, T0_US};

const ALGORITHMS: [&str; 3] = ["fixed_window", "sliding_window", "token_bucket"];

/// Domain `domain`: 100 a minute per tenant, one top-level key per algorithm.
fn config(domain: &str, overdraft: bool) -> String {
    let mut yaml = format!("domain: {domain}\ndescriptors:\n");
    for alg in ALGORITHMS {
        yaml.push_str(&format!(
            "  - key: tenant_{alg}\n    rate_limit: {{unit: minute, requests_per_unit: 100, algorithm: {alg}{}}}\n",
            if overdraft { ", overdraft: true" } else { "" }
        ));
    }
    yaml
}

fn load() -> LoadOptions {
    LoadOptions {
        usage_domains: UsageDomains::parse("usage*").expect("globs"),
        ..LoadOptions::default()
    }
}

fn costing(mut d: RateLimitDescriptor, cost: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(cost);
    d
}

/// What an answer says, for comparing two answers.
fn said(resp: &RateLimitResponse) -> (i32, Vec<(i32, u32, Option<i64>)>) {
    (
        resp.overall_code,
        resp.statuses
            .iter()
            .map(|s| {
                (
                    s.code,
                    s.limit_remaining,
                    s.duration_until_reset.map(|d| d.seconds),
                )
            })
            .collect(),
    )
}

async fn usage_equals_overdraft(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let limiter = limiter_with(
        &[&config("usage-tokens", false), &config("explicit", true)],
        &load(),
        Settings::default(),
        store(kind, &clock).await,
    );
    let mut seed: u64 = 0x5eed_1234;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for alg in ALGORITHMS {
        let key = format!("tenant_{alg}");
        for step in 0..60 {
            clock.advance([0, 0, 1_000_000, 7_000_000, 20_000_000][next(5) as usize]);
            let cost = [0, 0, 1, 5, 30, 60, 150][next(7) as usize];
            let ask = |domain: &str| {
                let d = costing(descriptor(&[(key.as_str(), "acme")]), cost);
                request(domain, vec![d])
            };
            let usage = limiter.should_rate_limit(&ask("usage-tokens")).await;
            let explicit = limiter.should_rate_limit(&ask("explicit")).await;
            let (usage, explicit) = (usage.expect("answers"), explicit.expect("answers"));
            assert_eq!(
                said(&usage),
                said(&explicit),
                "[{}] {alg} step {step} (cost {cost}): a usage domain answers as overdraft: true",
                kind.name()
            );
        }
    }
}

#[test]
fn a_usage_domain_answers_as_overdraft_limits_do() {
    for_every_store(usage_equals_overdraft);
}

/// Envoy's token pattern on one descriptor: check (0), then the response's 60 tokens.
async fn token_pattern(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let limiter = limiter_with(
        &[&config("usage-tokens", false), &config("plain", false)],
        &load(),
        Settings::default(),
        store(kind, &clock).await,
    );
    let name = kind.name();
    for alg in ALGORITHMS {
        let key = format!("tenant_{alg}");
        let d = |cost| costing(descriptor(&[(key.as_str(), "acme")]), cost);
        // An override (100 a minute, unit MINUTE = 2) on a key the config does not know.
        let od = |cost| {
            costing(
                with_override(descriptor(&[("tenant", "acme")]), 100, 2),
                cost,
            )
        };
        for (domain, third) in [("usage-tokens", OVER_LIMIT), ("plain", OK)] {
            for (what, desc) in [("config", &d as &dyn Fn(u64) -> _), ("override", &od)] {
                let ask = |cost| {
                    let req = request(domain, vec![desc(cost)]);
                    let limiter = &limiter;
                    async move { limiter.should_rate_limit(&req).await }
                };
                let at = format!("[{name}] {alg} {domain} {what}");
                assert_eq!(
                    ask(0).await.expect("answers").overall_code,
                    OK,
                    "{at}: check 1"
                );
                ask(60).await.expect("answers");
                assert_eq!(
                    ask(0).await.expect("answers").overall_code,
                    OK,
                    "{at}: check 2"
                );
                // 60 against 40 left: lands in a usage domain, refused and lost outside one.
                ask(60).await.expect("answers");
                let check = ask(0).await.expect("answers");
                assert_eq!(check.overall_code, third, "{at}: check 3");
                if third == OK {
                    assert_eq!(
                        check.statuses[0].limit_remaining, 40,
                        "{at}: nothing landed"
                    );
                }
            }
        }
        clock.advance(3_600_000_000);
    }
}

#[test]
fn envoys_token_pattern_stops_a_tenant_only_in_a_usage_domain() {
    for_every_store(token_pattern);
}
