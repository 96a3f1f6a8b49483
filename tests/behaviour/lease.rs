//! Leased shared limits (`lease: N`): two instances (two Redis stores with one key prefix, so
//! one set of counters) take units of a global limit N at a time and spend them locally.
//! Whatever the mix of requests, denials elsewhere and concurrency, Redis counts every unit
//! before it is spent, so the instances together never admit more than the limit; a denied
//! request's charge goes back to the lease it came from; on close the unspent units go back
//! to Redis, which then counts exactly what was admitted; and a lease never outlives its
//! window; a server gives its leases back when it stops. On a single node and on a cluster; the memory store is one instance and has no
//! leases.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tollgate::base::clock::ManualClock;
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::redis::RedisStore;
use tollgate::store::Store;
use tollgate::telemetry::metrics::Metrics;

use crate::support::kit::{
    for_stores, limiter, redis_url, unique_prefix, wait_ready, RedisSetup, StoreKind,
};
use crate::support::server::{
    self as common, bounded, descriptor, request, start_with_store, OK, OVER_LIMIT, T0_US,
};

const GLOBAL: u64 = 60;
const LEASE: u64 = 8;
/// A second shared limit, checked after the global one: requests it denies have charged the
/// global limit (from a lease) first, and must take that back.
const MODEL: u64 = 6;

/// The config of a leasing instance, or (`lease` false) of an observer without leases whose
/// tenant limit is never the tightest: the same rules and limits, so the same counter keys.
fn config(lease: bool) -> String {
    let (tenant, lease) = if lease {
        (2, format!(", lease: {LEASE}"))
    } else {
        (1_000_000, String::new())
    };
    format!(
        "domain: llm
descriptors:
  - key: tenant
    rate_limits:
      - {{name: tenant, unit: hour, requests_per_unit: {tenant}}}
      - {{name: global, unit: hour, requests_per_unit: {GLOBAL}, shared: true{lease}}}
  - key: model
    rate_limit: {{name: model, unit: hour, requests_per_unit: {MODEL}, shared: true}}
"
    )
}

struct Instance {
    store: Arc<RedisStore>,
    limiter: Arc<RateLimiter<RedisStore>>,
    metrics: Arc<Metrics>,
}

async fn instance(kind: StoreKind, prefix: &str, clock: &ManualClock, lease: bool) -> Instance {
    let mut setup = RedisSetup::new(redis_url(kind).expect("a redis kind"), clock);
    setup.key_prefix = prefix.to_string();
    setup.local_cache_size = 0;
    let metrics = setup.metrics.clone();
    let store = Arc::new(setup.connect());
    wait_ready(store.as_ref()).await;
    let limiter = Arc::new(limiter(&config(lease), Settings::default(), store.clone()));
    Instance {
        store,
        limiter,
        metrics,
    }
}

/// Sends every request at once, each from its own task: per instance, one request per entry
/// of `tenants` (a new tenant each, named by the entry and the instance), also charging the
/// model limit where the entry says so. Returns how many were admitted.
async fn burst(instances: &[&Instance], tenants: &[(usize, bool)]) -> u64 {
    let mut tasks = Vec::new();
    for (k, inst) in instances.iter().enumerate() {
        for &(t, model) in tenants {
            let limiter = inst.limiter.clone();
            let tenant = format!("t{t}-{k}");
            tasks.push(tokio::spawn(async move {
                let mut descriptors = vec![descriptor(&[("tenant", tenant.as_str())])];
                if model {
                    descriptors.push(descriptor(&[("model", "gpt")]));
                }
                let resp = limiter
                    .should_rate_limit(&request("llm", descriptors))
                    .await
                    .expect("answered");
                assert!(
                    resp.overall_code == OK || resp.overall_code == OVER_LIMIT,
                    "{resp:?}"
                );
                u64::from(resp.overall_code == OK)
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += bounded("request", t).await.expect("request task");
    }
    admitted
}

/// Units of the global limit Redis has counted, as an instance without leases sees them (a
/// check-only request: it charges nothing).
async fn used_in_redis(kind: StoreKind, prefix: &str, clock: &ManualClock) -> u64 {
    let observer = instance(kind, prefix, clock, false).await;
    let mut d = descriptor(&[("tenant", "observer")]);
    d.hits_addend = Some(0);
    let resp = observer
        .limiter
        .should_rate_limit(&request("llm", vec![d]))
        .await
        .expect("answered");
    let status = &resp.statuses[0];
    let limit = status.current_limit.as_ref().map(|l| l.requests_per_unit);
    assert_eq!(
        limit,
        Some(GLOBAL as u32),
        "the global limit answers: {resp:?}"
    );
    GLOBAL - u64::from(status.limit_remaining)
}

async fn two_instances_never_over_admit_and_refund_on_close(kind: StoreKind) {
    let name = kind.name();
    let clock = ManualClock::new(T0_US);
    let prefix = unique_prefix();
    let a = instance(kind, &prefix, &clock, true).await;
    let b = instance(kind, &prefix, &clock, true).await;

    // Phase 1, fewer requests than the global limit, in waves: per instance and wave, two
    // plain requests and two that the model limit (6 in all) denies once it is spent.
    let mut admitted = 0;
    for wave in 0..6 {
        let t = wave * 4;
        admitted += burst(
            &[&a, &b],
            &[(t, false), (t + 1, false), (t + 2, true), (t + 3, true)],
        )
        .await;
    }
    assert_eq!(admitted, 2 * 6 * 2 + MODEL, "{name}: admitted");
    let local = a.metrics.lease_local.get() + b.metrics.lease_local.get();
    let takes = a.metrics.lease_takes.get() + b.metrics.lease_takes.get();
    assert!(
        local > admitted / 2,
        "{name}: only {local} charges from a lease"
    );
    assert!(
        takes < admitted / 2,
        "{name}: {takes} lease takes for {admitted} admitted"
    );
    a.store.close().await;
    b.store.close().await;
    // Refunded: Redis counts exactly what was admitted (denied requests' charges went back
    // to the lease, unspent units were refunded in Redis).
    assert_eq!(
        used_in_redis(kind, &prefix, &clock).await,
        admitted,
        "{name}: Redis counts"
    );

    // Phase 2: far more requests than are left, at once from both instances: together they
    // never admit more than is left; units a lease holds when a burst ends go back on close,
    // and later bursts admit them.
    let mut total = admitted;
    let many: Vec<(usize, bool)> = (0..40).map(|i| (i, false)).collect();
    for round in 0..8 {
        let tenants: Vec<(usize, bool)> = many
            .iter()
            .map(|&(i, m)| (100 + round * 40 + i, m))
            .collect();
        total += burst(&[&a, &b], &tenants).await;
        assert!(
            total <= GLOBAL,
            "{name}: {total} admitted, the global limit is {GLOBAL}"
        );
        a.store.close().await;
        b.store.close().await;
        if total == GLOBAL {
            break;
        }
    }
    assert_eq!(total, GLOBAL, "{name}: everything is admitted in the end");
    assert_eq!(used_in_redis(kind, &prefix, &clock).await, GLOBAL, "{name}");
}

/// A lease lapses with its window: units leased in one window are never spent in the next.
async fn lease_lapses_with_its_window(kind: StoreKind) {
    let name = kind.name();
    let clock = ManualClock::new(T0_US);
    let prefix = unique_prefix();
    let a = instance(kind, &prefix, &clock, true).await;
    assert_eq!(burst(&[&a], &[(0, false)]).await, 1);
    // The request and the lease it took are counted.
    assert_eq!(
        used_in_redis(kind, &prefix, &clock).await,
        1 + LEASE,
        "{name}"
    );
    // The next hour: the old lease's units are void; a request takes a new lease.
    clock.advance(3_600_000_000);
    assert_eq!(burst(&[&a], &[(1, false)]).await, 1);
    assert_eq!(
        used_in_redis(kind, &prefix, &clock).await,
        1 + LEASE,
        "{name}"
    );
    // Spent from that lease: Redis is not asked and counts nothing more.
    let takes = a.metrics.lease_takes.get();
    assert_eq!(burst(&[&a], &[(2, false), (3, false), (4, false)]).await, 3);
    assert_eq!(a.metrics.lease_takes.get(), takes, "{name}: lease takes");
    assert_eq!(
        used_in_redis(kind, &prefix, &clock).await,
        1 + LEASE,
        "{name}"
    );
    // Closed: the unspent units go back.
    a.store.close().await;
    assert_eq!(used_in_redis(kind, &prefix, &clock).await, 4, "{name}");
}

/// A server that stops gives its unspent leases back after the drain.
async fn stopping_gives_leases_back(kind: StoreKind) {
    let name = kind.name();
    let clock = ManualClock::new(T0_US);
    let prefix = unique_prefix();
    let mut setup = RedisSetup::new(redis_url(kind).expect("a redis kind"), &clock);
    setup.key_prefix = prefix.clone();
    let store = Arc::new(setup.connect());
    let server = start_with_store(&config(true), Settings::default().into(), store).await;
    let mut client = server.client().await;
    for t in 0..3 {
        let tenant = format!("t{t}");
        let req = request("llm", vec![descriptor(&[("tenant", tenant.as_str())])]);
        assert_eq!(
            common::call(&mut client, req).await.overall_code,
            OK,
            "{name}"
        );
    }
    // Three admitted, and a lease of LEASE taken with the first.
    assert_eq!(
        used_in_redis(kind, &prefix, &clock).await,
        1 + LEASE,
        "{name}"
    );
    server.stop().await;
    assert_eq!(used_in_redis(kind, &prefix, &clock).await, 3, "{name}");
}

/// One instance alone admits exactly the limit: near the end, when Redis cannot cover a
/// top-up, what its lease holds is spent, not stranded.
async fn one_instance_spends_its_whole_lease(kind: StoreKind) {
    let name = kind.name();
    let clock = ManualClock::new(T0_US);
    let prefix = unique_prefix();
    let a = instance(kind, &prefix, &clock, true).await;
    let mut admitted = 0;
    for t in 0..GLOBAL as usize + 10 {
        admitted += burst(&[&a], &[(t, false)]).await;
    }
    assert_eq!(admitted, GLOBAL, "{name}: admitted");
    assert_eq!(used_in_redis(kind, &prefix, &clock).await, GLOBAL, "{name}");
}

/// A request that the model limit denies after it charged the global limit from a lease, and
/// whose caller stops waiting while it is decided (an Envoy timeout, a cancelled call): the
/// decision finishes as a task of its own and gives that charge back once, not twice.
async fn a_departed_callers_charge_goes_back_once(kind: StoreKind) {
    let name = kind.name();
    let clock = ManualClock::new(T0_US);
    let prefix = unique_prefix();
    let a = instance(kind, &prefix, &clock, true).await;
    // The model limit used up (the first request takes a lease).
    let mut admitted = 0;
    for t in 0..MODEL as usize {
        admitted += burst(&[&a], &[(t, true)]).await;
    }
    assert_eq!(admitted, MODEL, "{name}: admitted");
    // Denied by the model limit; each caller leaves once its decision has started. A decision
    // may also end within its first poll (a departed one before it finished on its task: the
    // refusal then charged nothing); at least one must have been left mid-decision.
    let mut left_pending = 0;
    for t in 0..2 * LEASE as usize {
        let tenant = format!("gone{t}");
        let req = request(
            "llm",
            vec![
                descriptor(&[("tenant", tenant.as_str())]),
                descriptor(&[("model", "gpt")]),
            ],
        );
        // Polled once, then dropped.
        let mut decision = std::pin::pin!(a.limiter.should_rate_limit(&req));
        let answered = std::future::poll_fn(|cx| Poll::Ready(decision.as_mut().poll(cx))).await;
        match answered {
            Poll::Pending => left_pending += 1,
            Poll::Ready(Ok(r)) if r.overall_code == OVER_LIMIT => {}
            other => panic!("{name}: answered at once, not refused: {other:?}"),
        }
    }
    assert!(
        left_pending > 0,
        "{name}: every decision ended in its first poll"
    );
    // Their decisions end on their own tasks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for t in 0..GLOBAL as usize + 10 {
        admitted += burst(&[&a], &[(100 + t, false)]).await;
    }
    assert_eq!(admitted, GLOBAL, "{name}: admitted in all");
    a.store.close().await;
    assert_eq!(used_in_redis(kind, &prefix, &clock).await, GLOBAL, "{name}");
}

/// Runs `suite` on a single Redis node and on the cluster (the memory store has no leases).
fn on_redis_stores<F, Fut>(suite: F)
where
    F: Fn(StoreKind) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()>,
{
    for_stores(&[StoreKind::Redis, StoreKind::Cluster], suite)
}

#[test]
fn leased_shared_limits_never_over_admit_and_refund_on_close() {
    on_redis_stores(two_instances_never_over_admit_and_refund_on_close);
}

#[test]
fn a_lease_never_outlives_its_window() {
    on_redis_stores(lease_lapses_with_its_window);
}

#[test]
fn a_stopped_server_gives_its_leases_back() {
    on_redis_stores(stopping_gives_leases_back);
}

#[test]
fn one_instance_alone_admits_exactly_the_limit() {
    on_redis_stores(one_instance_spends_its_whole_lease);
}

#[test]
fn a_departed_callers_lease_charge_goes_back_once() {
    on_redis_stores(a_departed_callers_charge_goes_back_once);
}
