//! Tenant and shared (global) limits under concurrency: two tenants, each limited to 40, share
//! a global limit of 60. 2 × 100 requests fired at once must admit at most 40 per tenant and
//! exactly 60 in all — no lost update, no over-admission, no charge left behind by a denied
//! request. Runs over gRPC against a real in-process server (per-tenant `rate_limits`) and
//! through `RateLimiter` from many tasks (a `hierarchical` tenant rule; there also staged, one
//! tenant's burst first, so the tenant limit denies and must charge nothing shared), for every
//! algorithm, on every store of the kit, rounds each on a fresh store. The clock is manual,
//! so no window rolls.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Barrier;
use tollgate::base::clock::ManualClock;
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;

use crate::support::kit::{for_every_store, limiter, store, AnyStore, StoreKind};
use crate::support::server::{
    self as common, bounded, descriptor, request, start_with_store, OK, OVER_LIMIT, T0_US,
};

const TENANTS: [&str; 2] = ["acme", "globex"];
const PER_TENANT: usize = 100;
const TENANT_LIMIT: usize = 40;
const SHARED_LIMIT: usize = 60;
const ROUNDS: usize = 3;
const ALGORITHMS: [&str; 3] = ["fixed_window", "sliding_window", "token_bucket"];

/// Per-tenant and shared limits side by side on one rule, one top-level key per algorithm.
fn rate_limits_config() -> String {
    let mut yaml = String::from("domain: tenants\ndescriptors:\n");
    for alg in ALGORITHMS {
        yaml.push_str(&format!(
            "  - key: tenant_{alg}
    rate_limits:
      - {{name: tenant, unit: minute, requests_per_unit: {TENANT_LIMIT}, algorithm: {alg}}}
      - {{name: global, unit: minute, requests_per_unit: {SHARED_LIMIT}, algorithm: {alg}, shared: true}}
"
        ));
    }
    yaml
}

/// A hierarchical tenant rule: its limits apply to every request below it (here per user).
fn hierarchical_config() -> String {
    let mut yaml = String::from("domain: tenants\ndescriptors:\n");
    for alg in ALGORITHMS {
        yaml.push_str(&format!(
            "  - key: tenant_{alg}
    hierarchical: true
    rate_limits:
      - {{name: tenant, unit: minute, requests_per_unit: {TENANT_LIMIT}, algorithm: {alg}}}
      - {{name: global, unit: minute, requests_per_unit: {SHARED_LIMIT}, algorithm: {alg}, shared: true}}
    descriptors:
      - key: user
        rate_limit: {{name: user, unit: minute, requests_per_unit: 1000, algorithm: {alg}}}
"
        ));
    }
    yaml
}

/// OK answers per tenant; panics on an answer that is neither OK nor OVER_LIMIT.
fn tally(answers: &[(usize, i32)]) -> HashMap<&'static str, usize> {
    let mut ok = HashMap::new();
    for &(tenant, code) in answers {
        assert!(code == OK || code == OVER_LIMIT, "unexpected code {code}");
        if code == OK {
            *ok.entry(TENANTS[tenant]).or_insert(0) += 1;
        }
    }
    ok
}

fn check(what: &str, answers: &[(usize, i32)]) {
    assert_eq!(answers.len(), TENANTS.len() * PER_TENANT, "{what}: answers");
    let ok = tally(answers);
    for tenant in TENANTS {
        let n = ok.get(tenant).copied().unwrap_or(0);
        assert!(
            n <= TENANT_LIMIT,
            "{what}: {tenant} got {n} OK, its limit is {TENANT_LIMIT}"
        );
    }
    let total: usize = ok.values().sum();
    assert_eq!(
        total, SHARED_LIMIT,
        "{what}: OK answers across tenants ({ok:?})"
    );
}

async fn grpc_tenants_share_a_global_limit_exactly(kind: StoreKind) {
    const CONNECTIONS: usize = 8;
    let yaml = rate_limits_config();
    for round in 0..ROUNDS {
        let clock = ManualClock::new(T0_US);
        let server =
            start_with_store(&yaml, Settings::default().into(), store(kind, &clock).await).await;
        let mut clients = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            clients.push(server.client().await);
        }
        for alg in ALGORITHMS {
            let n = TENANTS.len() * PER_TENANT;
            let barrier = Arc::new(Barrier::new(n));
            let mut tasks = Vec::with_capacity(n);
            for i in 0..n {
                let tenant = i % TENANTS.len();
                let mut client = clients[i % CONNECTIONS].clone();
                let barrier = barrier.clone();
                let key = format!("tenant_{alg}");
                tasks.push(tokio::spawn(async move {
                    let req = request("tenants", vec![descriptor(&[(&key, TENANTS[tenant])])]);
                    barrier.wait().await;
                    let resp = common::call(&mut client, req).await;
                    (tenant, resp.overall_code)
                }));
            }
            let mut answers = Vec::with_capacity(n);
            for t in tasks {
                answers.push(bounded("request task", t).await.expect("request task"));
            }
            check(&format!("gRPC {alg}, round {round}"), &answers);
        }
        server.stop().await;
    }
}

/// A limiter over a fresh store of `kind`, its clock stopped at [`T0_US`].
async fn fresh_limiter(kind: StoreKind) -> Arc<RateLimiter<AnyStore>> {
    let store = store(kind, &ManualClock::new(T0_US)).await;
    Arc::new(limiter(&hierarchical_config(), Settings::default(), store))
}

/// Fires one request per entry of `tenants` (each from its own user) from its own task, all
/// released together; returns each request's tenant and overall code.
async fn burst(
    limiter: &Arc<RateLimiter<AnyStore>>,
    alg: &str,
    tenants: &[usize],
) -> Vec<(usize, i32)> {
    let barrier = Arc::new(Barrier::new(tenants.len()));
    let mut tasks = Vec::with_capacity(tenants.len());
    for (i, &tenant) in tenants.iter().enumerate() {
        let limiter = limiter.clone();
        let barrier = barrier.clone();
        let key = format!("tenant_{alg}");
        let user = format!("u{i}");
        tasks.push(tokio::spawn(async move {
            let req = request(
                "tenants",
                vec![descriptor(&[
                    (key.as_str(), TENANTS[tenant]),
                    ("user", user.as_str()),
                ])],
            );
            barrier.wait().await;
            let resp = limiter
                .should_rate_limit(&req)
                .await
                .expect("the store answers");
            assert_eq!(resp.statuses.len(), 1, "{resp:?}");
            (tenant, resp.overall_code)
        }));
    }
    let mut answers = Vec::with_capacity(tenants.len());
    for t in tasks {
        answers.push(bounded("request task", t).await.expect("request task"));
    }
    answers
}

async fn hierarchical_tenants_share_a_global_limit_exactly_from_many_tasks(kind: StoreKind) {
    for round in 0..ROUNDS {
        for alg in ALGORITHMS {
            // Both tenants race for the shared limit.
            let mixed: Vec<usize> = (0..TENANTS.len() * PER_TENANT)
                .map(|i| i % TENANTS.len())
                .collect();
            let answers = burst(&fresh_limiter(kind).await, alg, &mixed).await;
            check(
                &format!("hierarchical {alg}, mixed, round {round}"),
                &answers,
            );

            // The first tenant's burst runs into its own limit; those denials must charge
            // nothing shared, so the second tenant still gets exactly what is left (20).
            let limiter = fresh_limiter(kind).await;
            let mut answers = burst(&limiter, alg, &[0; PER_TENANT]).await;
            answers.extend(burst(&limiter, alg, &[1; PER_TENANT]).await);
            let what = format!("hierarchical {alg}, staged, round {round}");
            check(&what, &answers);
            let ok = tally(&answers);
            assert_eq!(
                (ok.get(TENANTS[0]).copied(), ok.get(TENANTS[1]).copied()),
                (Some(TENANT_LIMIT), Some(SHARED_LIMIT - TENANT_LIMIT)),
                "{what}"
            );
        }
    }
}

#[test]
fn grpc_tenants_share_a_global_limit_exactly_on_every_store() {
    for_every_store(grpc_tenants_share_a_global_limit_exactly);
}

#[test]
fn hierarchical_tenants_share_a_global_limit_exactly_on_every_store() {
    for_every_store(hierarchical_tenants_share_a_global_limit_exactly_from_many_tasks);
}

/// Tenants below a constant first entry (`tier=free`, the same for all of them) spread over
/// every primary of the cluster: the hash tag goes down to the per-tenant level, while each
/// tenant's charges (tenant and model) still share one slot (no CROSSSLOT, exact counts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_below_a_constant_tier_spread_over_every_primary() {
    use crate::support::kit::{blocking, redis_cluster, wait_ready, RedisSetup};
    let yaml = "\
domain: tiers
descriptors:
  - key: tier
    value: free
    descriptors:
      - key: tenant
        hierarchical: true
        rate_limit: {name: tenant, unit: minute, requests_per_unit: 2}
        descriptors:
          - key: model
            rate_limit: {name: model, unit: minute, requests_per_unit: 5}
";
    let clock = ManualClock::new(T0_US);
    let cluster = redis_cluster();
    let setup = RedisSetup::new(blocking(|| cluster.seed_url()), &clock);
    let prefix = setup.key_prefix.clone();
    let store = Arc::new(setup.connect());
    wait_ready(store.as_ref()).await;
    let limiter = limiter(yaml, Settings::default(), store);
    let tenants: Vec<String> = (0..60).map(|i| format!("t{i}")).collect();
    for round in 0..3 {
        for t in &tenants {
            let req = request(
                "tiers",
                vec![descriptor(&[
                    ("tier", "free"),
                    ("tenant", t),
                    ("model", "gpt"),
                ])],
            );
            let resp = limiter.should_rate_limit(&req).await.expect("decided");
            let want = if round < 2 { OK } else { OVER_LIMIT };
            assert_eq!(resp.overall_code, want, "tenant {t}, round {round}");
        }
    }
    let per_primary: Vec<(u16, usize)> = blocking(|| {
        cluster
            .masters()
            .into_iter()
            .map(|port| {
                let pattern = format!("{prefix}*");
                let keys = cluster.cli(port, &["--scan", "--pattern", &pattern]);
                let marker = format!("{prefix}marker:");
                let counters = keys
                    .lines()
                    .filter(|l| !l.is_empty() && !l.starts_with(&marker));
                (port, counters.count())
            })
            .collect()
    });
    let total: usize = per_primary.iter().map(|(_, n)| n).sum();
    assert_eq!(
        total,
        2 * tenants.len(),
        "a tenant and a model counter per tenant"
    );
    assert!(
        per_primary.iter().all(|&(_, n)| n > 0),
        "tenants did not spread over every primary: {per_primary:?}"
    );
}

/// Asks `requests` in turn of a limiter on `yaml` over a fresh store on `redis`: their codes,
/// the `EVALSHA`s they cost Redis, and the refunds.
async fn codes_and_script_calls(
    redis: &crate::support::redis::RedisServer,
    yaml: &str,
    requests: &[&tollgate::pb::rls::RateLimitRequest],
) -> (Vec<i32>, u64, u64) {
    use crate::support::kit::{blocking, wait_ready, RedisSetup};
    let clock = ManualClock::new(T0_US);
    let setup = RedisSetup::new(redis.url(), &clock);
    let metrics = setup.metrics.clone();
    let store = Arc::new(setup.connect());
    wait_ready(store.as_ref()).await;
    let limiter = limiter(yaml, Settings::default(), store);
    let before = blocking(|| redis.evalsha_calls());
    let mut codes = Vec::new();
    for req in requests {
        let resp = limiter.should_rate_limit(req).await.expect("decided");
        codes.push(resp.overall_code);
    }
    let calls = blocking(|| redis.evalsha_calls()) - before;
    (codes, calls, metrics.refunds.get())
}

/// A group's limits are decided all-or-nothing inside its one script call: a request that
/// one limit of a hierarchical group denies (the model's) lands nothing on the others (the
/// tenant's), so it costs Redis one `EVALSHA` and nothing is refunded. A script that landed
/// the charges that fit would still answer right, but only after a refund: a second call,
/// and a moment in which the tenant's counter holds a charge it should not. Every algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_one_limit_denies_lands_nothing_in_one_script_call() {
    let redis = crate::support::kit::blocking(crate::support::redis::RedisServer::start);
    for alg in ALGORITHMS {
        let yaml = format!(
            "domain: all
descriptors:
  - key: tenant
    hierarchical: true
    rate_limit: {{name: tenant, unit: minute, requests_per_unit: 3, algorithm: {alg}}}
    descriptors:
      - key: model
        rate_limit: {{name: model, unit: minute, requests_per_unit: 2, algorithm: {alg}}}
"
        );
        let req = |model: &str| {
            request(
                "all",
                vec![descriptor(&[("tenant", "acme"), ("model", model)])],
            )
        };
        let (gpt, claude) = (req("gpt"), req("claude"));
        let (codes, calls, refunds) =
            codes_and_script_calls(&redis, &yaml, &[&gpt, &gpt, &gpt, &claude, &claude]).await;
        // gpt, gpt; the third gpt is over the model's 2 and charges the tenant nothing, so
        // claude still fits (the tenant's 3rd) and then the tenant is full.
        assert_eq!(codes, [OK, OK, OVER_LIMIT, OK, OVER_LIMIT], "{alg}");
        assert_eq!(calls, 5, "{alg}: one script call per request");
        assert_eq!(refunds, 0, "{alg}: refunds");
    }
}

/// On one Redis node every key is in one place, so a request's charges (its descriptors'
/// groups and a shared limit, which on a cluster live in slots of their own) are one script
/// call, decided all-or-nothing: a request that the shared limit denies lands nothing on the
/// others and costs one `EVALSHA`, with nothing to refund. The answers are those of the
/// cluster's steps (descriptor groups, then the shared limit, then a refund). Every
/// algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_node_a_request_with_a_shared_limit_is_one_script_call() {
    let redis = crate::support::kit::blocking(crate::support::redis::RedisServer::start);
    for alg in ALGORITHMS {
        let yaml = format!(
            "domain: one
descriptors:
  - key: tenant
    rate_limits:
      - {{name: tenant, unit: minute, requests_per_unit: 5, algorithm: {alg}}}
      - {{name: global, unit: minute, requests_per_unit: 3, algorithm: {alg}, shared: true}}
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: 4, algorithm: {alg}}}
"
        );
        let both = request(
            "one",
            vec![
                descriptor(&[("tenant", "acme")]),
                descriptor(&[("user", "u1")]),
            ],
        );
        let user = request("one", vec![descriptor(&[("user", "u1")])]);
        let requests = [&both, &both, &both, &both, &user, &user];
        let (codes, calls, refunds) = codes_and_script_calls(&redis, &yaml, &requests).await;
        // The shared limit (3) denies the 4th request, which leaves the user's counter at 3
        // of 4: the user alone then fits once more.
        assert_eq!(codes, [OK, OK, OK, OVER_LIMIT, OK, OVER_LIMIT], "{alg}");
        assert_eq!(calls, 6, "{alg}: one script call per request");
        assert_eq!(refunds, 0, "{alg}: refunds");
    }
}
