//! A fair share among a shared pool's active tenants, on every store: while the pool, with the
//! request, stays within `above`, any tenant may use it; past that a tenant is held to
//! max(floor, the pool ÷ the tenants active in the window), and a tenant is active from its
//! first request of the window, admitted or refused. The target: 10 tenants, one sending 10
//! times what each other sends, the pool contended, each quiet tenant gets at least 90% of
//! min(its demand, the pool ÷ 10); with callers racing (on Redis, two instances) the pool is
//! never overspent.

use std::sync::Arc;

use tollgate::admin::counters::{inspect, Selector};
use tollgate::base::clock::ManualClock;
use tollgate::config::load::{compile_sources, LoadOptions};
use tollgate::service::settings::Settings;
use tollgate::service::validate::Bounds;
use tollgate::service::RateLimiter;
use tollgate::store::any::AnyStore;

use crate::support::kit::{
    for_every_store, for_stores, limiter, racing_limiters, store, StoreKind,
};
use crate::support::server::{req, OK, OVER_LIMIT, T0_US};

/// A pool of 100 an hour per model (`m1`, `m2`: one pool each), every tenant together, free
/// while within 30 of it, then a fair share of it among the active tenants (at least 2 each);
/// a pool of 200 a minute (`m3`) with the defaults (`above: 0.3`, `floor: 1`).
const CONFIG: &str = "\
domain: fair
descriptors:
  - key: model
    value: m1
    hierarchical: true
    rate_limit: &pool
      {name: pool, unit: hour, requests_per_unit: 100, shared: true,
       fair_share: {by: tenant, above: 0.3, floor: 2}}
    descriptors: [{key: tenant}]
  - key: model
    value: m2
    hierarchical: true
    rate_limit: *pool
    descriptors: [{key: tenant}]
  - key: model
    value: m3
    hierarchical: true
    rate_limit:
      {name: provider, unit: minute, requests_per_unit: 200, shared: true,
       fair_share: {by: tenant}}
    descriptors: [{key: tenant}]
";

/// One request of `tenant` on `model`'s pool: admitted?
async fn ask(l: &RateLimiter<AnyStore>, model: &str, tenant: &str) -> bool {
    let r = l
        .should_rate_limit(&req("fair", &[&[("model", model), ("tenant", tenant)]]))
        .await
        .expect("an answer");
    match r.overall_code {
        OK => true,
        OVER_LIMIT => false,
        other => panic!("code {other}"),
    }
}

/// `n` requests of `tenant` one after another: how many were admitted.
async fn send(l: &RateLimiter<AnyStore>, model: &str, tenant: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += ask(l, model, tenant).await as usize;
    }
    admitted
}

/// The counters an operator reads for `model`'s pool as `tenant` (`/counters`).
async fn counters(st: &AnyStore, model: &str, tenant: &str) -> Vec<(String, u64)> {
    let config = compile_sources(&[("f.yaml".into(), CONFIG.into())], &LoadOptions::default())
        .expect("config compiles");
    let sel = Selector {
        domain: "fair".into(),
        entries: vec![
            ("model".into(), model.into()),
            ("tenant".into(), tenant.into()),
        ],
        limit: None,
    };
    let views = inspect(&config, st, &Bounds::default(), &sel)
        .await
        .expect("counters");
    views.into_iter().map(|v| (v.name, v.used)).collect()
}

async fn rules(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let st = store(kind, &clock).await;
    let l = limiter(CONFIG, Settings::default(), st.clone());

    // m1: a tenant alone has the pool to itself: free to 30, then its share of one tenant.
    assert_eq!(send(&l, "m1", "a", 100).await, 100, "alone, the whole pool");
    // A request refused (the pool is spent) still makes its tenant active.
    assert_eq!(send(&l, "m1", "b", 1).await, 0);
    let seen = counters(&st, "m1", "b").await;
    assert!(
        seen.contains(&("pool/active_tenants".to_string(), 2)),
        "{seen:?}"
    );
    assert!(seen.contains(&("pool/tenant".to_string(), 0)), "{seen:?}");

    // m2: a takes 20 while the pool is free; b and c arrive (3 active); a is free to 30 of
    // the pool, then held to 100 ÷ 3 = 33; b and c then to 33 each; d, the fourth, to 25 but
    // finds 1 left.
    assert_eq!(send(&l, "m2", "a", 20).await, 20);
    assert_eq!(send(&l, "m2", "b", 1).await, 1);
    assert_eq!(send(&l, "m2", "c", 1).await, 1);
    assert_eq!(send(&l, "m2", "a", 100).await, 13, "to its share, 33");
    assert_eq!(send(&l, "m2", "b", 100).await, 32);
    assert_eq!(send(&l, "m2", "c", 100).await, 32);
    assert_eq!(send(&l, "m2", "d", 5).await, 1, "the pool's last");
    let seen = counters(&st, "m2", "a").await;
    assert_eq!(
        seen,
        [
            ("pool".to_string(), 100),
            ("pool/tenant".to_string(), 33),
            ("pool/active_tenants".to_string(), 4)
        ]
    );

    // The next window starts afresh: nobody is active, a is free again.
    clock.advance(3_600_000_000);
    assert_eq!(send(&l, "m2", "a", 40).await, 40);
    let seen = counters(&st, "m2", "a").await;
    assert!(
        seen.contains(&("pool/active_tenants".to_string(), 1)),
        "{seen:?}"
    );
}

#[test]
fn a_tenant_is_held_to_its_share_of_the_active_tenants_past_the_threshold() {
    for_every_store(rules);
}

/// The target: 10 tenants in rounds (each round awaited before the next), the noisy one
/// sending 10 a round and each quiet one 1, for 30 rounds, all at once within a round, over
/// `limiters`; the pool is 200, so each quiet tenant wants 30 and should get at least 90% of
/// 200 ÷ 10 = 18. The pool is never overspent, and the noisy tenant takes no more than what it
/// took while the pool was free (at most 60 less the quiet tenants' 3 rounds) or its share.
async fn contended(limiters: Vec<Arc<RateLimiter<AnyStore>>>) {
    let mut got = [0u64; 10];
    for _ in 0..30 {
        let mut tasks = Vec::new();
        for t in 0..10usize {
            for _ in 0..if t == 0 { 10 } else { 1 } {
                let l = limiters[tasks.len() % limiters.len()].clone();
                tasks.push(tokio::spawn(async move {
                    (t, ask(&l, "m3", &format!("tenant{t}")).await)
                }));
            }
        }
        for task in tasks {
            let (t, ok) = task.await.expect("a caller");
            got[t] += ok as u64;
        }
    }
    let total: u64 = got.iter().sum();
    assert!(total <= 200, "the pool overspent: {got:?}");
    assert!(got[0] <= 33, "the noisy tenant past its share: {got:?}");
    for (t, &n) in got.iter().enumerate().skip(1) {
        assert!(n >= 18, "quiet tenant {t} got {n} of its 20: {got:?}");
    }
}

#[test]
fn quiet_tenants_get_their_share_beside_a_noisy_one_on_memory() {
    for_stores(&[StoreKind::Memory], |kind| async move {
        let clock = ManualClock::new(T0_US);
        contended(racing_limiters(kind, &clock, CONFIG, Settings::default()).await).await;
    });
}

#[test]
fn two_instances_keep_quiet_tenants_share_beside_a_noisy_one() {
    for_stores(&[StoreKind::Redis, StoreKind::Cluster], |kind| async move {
        let clock = ManualClock::new(T0_US);
        contended(racing_limiters(kind, &clock, CONFIG, Settings::default()).await).await;
    });
}
