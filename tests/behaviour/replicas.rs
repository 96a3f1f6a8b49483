//! `--read-replicas` on a Redis Cluster with a replica per primary: a request that charges
//! nothing (every cost 0) is answered by a replica, with what the primaries counted once it
//! has replicated; a request that charges never goes to a replica, and a check-only one never
//! to a primary.

use std::sync::Arc;
use std::time::Duration;

use tollgate::base::clock::ManualClock;
use tollgate::service::settings::Settings;
use tollgate::store::Store;
use tollgate::telemetry::metrics::Metrics;

use crate::support::kit::{blocking, limiter, wait_ready, RedisSetup};
use crate::support::redis::{evalsha_calls_on, RedisCluster};
use crate::support::server::{descriptor, request, OK, T0_US};

const LIMIT: u32 = 10;

/// `EVALSHA` calls each node has served, from `INFO commandstats`.
fn evalsha_calls(ports: &[u16]) -> u64 {
    ports.iter().map(|&p| evalsha_calls_on(p)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_charge_nothing_are_answered_by_replicas() {
    let cluster = blocking(|| RedisCluster::start(3, 1));
    let (primaries, replicas) = blocking(|| (cluster.masters(), cluster.replicas()));
    assert_eq!((primaries.len(), replicas.len()), (3, 3));
    let clock = ManualClock::new(T0_US);
    let mut setup = RedisSetup::new(cluster.seed_url(), &clock);
    setup.read_replicas = true;
    let metrics: Arc<Metrics> = setup.metrics.clone();
    let store = Arc::new(setup.connect());
    wait_ready(store.as_ref()).await;
    let yaml = format!(
        "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: hour, requests_per_unit: {LIMIT}}}\n"
    );
    let limiter = limiter(&yaml, Settings::default(), store.clone());
    let ask = |tenant: &str, cost: u64| {
        let mut d = descriptor(&[("tenant", tenant)]);
        d.hits_addend = Some(cost);
        request("d", vec![d])
    };

    // Charges go to the primaries only.
    let on_replicas = blocking(|| evalsha_calls(&replicas));
    for _ in 0..4 {
        let resp = limiter
            .should_rate_limit(&ask("acme", 1))
            .await
            .expect("answered");
        assert_eq!(resp.overall_code, OK);
    }
    assert_eq!(blocking(|| evalsha_calls(&replicas)), on_replicas);

    // Check-only requests: answered by replicas (once a primary lists its replica, which it
    // does after the replica has acknowledged replication; upkeep re-reads the topology until
    // then), with the primaries' count once replicated.
    let mut answered = None;
    for _ in 0..100 {
        store.maintain().await;
        let before = blocking(|| evalsha_calls(&replicas));
        let resp = limiter
            .should_rate_limit(&ask("acme", 0))
            .await
            .expect("answered");
        assert_eq!(resp.overall_code, OK, "{resp:?}");
        let by_replica = blocking(|| evalsha_calls(&replicas)) > before;
        answered = Some((by_replica, resp.statuses[0].limit_remaining));
        if answered == Some((true, LIMIT - 4)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        answered,
        Some((true, LIMIT - 4)),
        "(by a replica, remaining)"
    );
    // From now on, its check-only requests never reach a primary.
    let on_primaries = blocking(|| evalsha_calls(&primaries));
    for _ in 0..5 {
        let resp = limiter
            .should_rate_limit(&ask("acme", 0))
            .await
            .expect("answered");
        assert_eq!(resp.statuses[0].limit_remaining, LIMIT - 4);
    }
    assert_eq!(
        blocking(|| evalsha_calls(&primaries)),
        on_primaries,
        "a check-only request reached a primary"
    );
    assert!(metrics.replica_reads.get() >= 6, "replica reads counted");
    // A tenant nobody charged (its primary's replica may not be listed yet: then its primary
    // answers) has everything left.
    let fresh = limiter
        .should_rate_limit(&ask("globex", 0))
        .await
        .expect("answered");
    assert_eq!(fresh.overall_code, OK);
    assert_eq!(fresh.statuses[0].limit_remaining, LIMIT);
}
