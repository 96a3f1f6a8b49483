//! Guaranteed shares of a shared pool by class, on every store: a class under its guarantee is
//! admitted whenever the pool has room; past it, a class borrows only while the pool stays
//! within `borrow_until`. So a flood of one class stops at `borrow_until` and a class that
//! returns finds the headroom at once; a class's guarantee holds while another floods; and with
//! callers racing (on Redis, two instances) the pool is never overspent and each class gets
//! what the rule says.

use std::sync::atomic::{AtomicU64, Ordering};
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

/// A pool of 100 an hour per model (`m1`, `m2`, `m3`: one pool each), every tenant together:
/// interactive is guaranteed half, batch 30%, and a class past its guarantee borrows while the
/// pool stays within 80. A missing or unknown priority is batch.
const CONFIG: &str = "\
domain: shares
descriptors:
  - key: model
    value: m1
    hierarchical: true
    rate_limit: &pool
      {name: pool, unit: hour, requests_per_unit: 100, shared: true,
       shares: {by: priority, classes: {interactive: 0.5, batch: 0.3}, default: batch, borrow_until: 0.8}}
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
  - key: model
    value: m2
    hierarchical: true
    rate_limit: *pool
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
  - key: model
    value: m3
    hierarchical: true
    rate_limit: *pool
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
";

/// One request of `tenant` in `class` on `model`'s pool: admitted?
async fn ask(l: &RateLimiter<AnyStore>, model: &str, tenant: &str, class: &str) -> bool {
    let entries: Vec<(&str, &str)> = match class {
        "" => vec![("model", model), ("tenant", tenant)],
        c => vec![("model", model), ("tenant", tenant), ("priority", c)],
    };
    let r = l
        .should_rate_limit(&req("shares", &[&entries]))
        .await
        .expect("an answer");
    match r.overall_code {
        OK => true,
        OVER_LIMIT => false,
        other => panic!("code {other}"),
    }
}

/// `n` requests one after another: how many were admitted.
async fn send(l: &RateLimiter<AnyStore>, model: &str, class: &str, n: usize) -> usize {
    let mut admitted = 0;
    for i in 0..n {
        admitted += ask(l, model, &format!("t{}", i % 7), class).await as usize;
    }
    admitted
}

async fn rules(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let st = store(kind, &clock).await;
    let l = limiter(CONFIG, Settings::default(), st.clone());

    // m1: batch alone floods: its 30, then borrowing up to 80 of the pool. An unknown class and
    // no class at all are batch.
    assert_eq!(send(&l, "m1", "batch", 60).await, 60, "within 80");
    assert_eq!(send(&l, "m1", "nosuch", 15).await, 15);
    assert_eq!(send(&l, "m1", "", 100).await, 5, "borrowing stops at 80");
    // Interactive returns: under its guarantee, it gets the headroom at once, to the pool's end.
    assert_eq!(send(&l, "m1", "interactive", 50).await, 20, "the headroom");
    assert_eq!(send(&l, "m1", "batch", 5).await, 0);

    // m2: interactive first (40, under its 50); batch then has its 30 and borrows to 80;
    // interactive then has what is left of its guarantee (10), and neither borrows past 80.
    assert_eq!(send(&l, "m2", "interactive", 40).await, 40);
    assert_eq!(
        send(&l, "m2", "batch", 100).await,
        40,
        "30 + borrowing to 80"
    );
    assert_eq!(
        send(&l, "m2", "interactive", 100).await,
        10,
        "its guarantee's rest"
    );
    assert_eq!(send(&l, "m2", "batch", 10).await, 0);

    // What an operator reads (`/counters`, the status page): the pool and every class's use
    // beside its guarantee, whichever class the descriptor names.
    let config = compile_sources(&[("s.yaml".into(), CONFIG.into())], &LoadOptions::default())
        .expect("config compiles");
    let sel = Selector {
        domain: "shares".into(),
        entries: vec![("model".into(), "m2".into())],
        limit: None,
    };
    let views = inspect(&config, &*st, &Bounds::default(), &sel)
        .await
        .expect("counters");
    let seen: Vec<(&str, u64, u64)> = views
        .iter()
        .map(|v| (v.name.as_str(), v.limit, v.used))
        .collect();
    assert_eq!(
        seen,
        [
            ("pool", 100, 90),
            ("pool/batch", 30, 40),
            ("pool/interactive", 50, 50)
        ],
        "{views:?}"
    );
}

#[test]
fn a_class_keeps_its_guarantee_and_borrows_only_below_the_threshold() {
    for_every_store(rules);
}

/// Batch sends 10 × what interactive sends, all at once, over `limiters`: the pool is never
/// overspent, batch never past 80, and interactive (under its guarantee throughout) gets at
/// least the headroom, and is refused only once the pool is spent.
async fn race(limiters: Vec<Arc<RateLimiter<AnyStore>>>) {
    let batch = Arc::new(AtomicU64::new(0));
    let interactive = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..275 {
        let l = limiters[i % limiters.len()].clone();
        let class = if i % 11 == 0 { "interactive" } else { "batch" };
        let got = if class == "batch" {
            batch.clone()
        } else {
            interactive.clone()
        };
        tasks.push(tokio::spawn(async move {
            if ask(&l, "m3", &format!("t{i}"), class).await {
                got.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        t.await.expect("a caller");
    }
    let (b, i) = (
        batch.load(Ordering::SeqCst),
        interactive.load(Ordering::SeqCst),
    );
    assert!(
        b + i <= 100,
        "the pool overspent: batch {b}, interactive {i}"
    );
    assert!(b <= 80, "batch borrowed past 80: {b}");
    assert!(
        i >= 20,
        "interactive found less than the headroom: {i}, batch {b}"
    );
    assert!(
        i == 25 || b + i == 100,
        "interactive, under its guarantee, was refused while the pool had room: {i}, batch {b}"
    );
    assert!(b >= 30, "batch keeps its own guarantee: {b}");
}

#[test]
fn racing_classes_never_overspend_the_pool_on_memory() {
    for_stores(&[StoreKind::Memory], |kind| async move {
        let clock = ManualClock::new(T0_US);
        race(racing_limiters(kind, &clock, CONFIG, Settings::default()).await).await;
    });
}

#[test]
fn two_instances_racing_classes_never_overspend_the_pool() {
    for_stores(&[StoreKind::Redis, StoreKind::Cluster], |kind| async move {
        let clock = ManualClock::new(T0_US);
        race(racing_limiters(kind, &clock, CONFIG, Settings::default()).await).await;
    });
}
