//! The memory store stays within `--max-store-bytes` under a flood of distinct values (the
//! attacker-chosen kind, on a key-only rule with a day window): expired counters go first,
//! then the live ones closest to expiry, each eviction counted.

use std::sync::Arc;

use tollgate::base::clock::ManualClock;
use tollgate::service::settings::Settings;
use tollgate::store::memory::MemoryStore;
use tollgate::telemetry::metrics::Metrics;

use crate::support::kit::limiter;
use crate::support::server::{req, T0_US};

const DAILY: &str = "
domain: flood
descriptors:
  - key: v
    rate_limit: {unit: day, requests_per_unit: 5}
";

#[tokio::test]
async fn a_flood_of_distinct_values_stays_under_the_cap() {
    let cap = 256 << 10;
    let metrics = Arc::new(Metrics::new());
    let clock = ManualClock::new(T0_US);
    let store = Arc::new(
        MemoryStore::new(Arc::new(clock.clone()))
            .with_metrics(metrics.clone())
            .with_max_bytes(cap),
    );
    let l = limiter(DAILY, Settings::default(), store.clone());
    // 1 KiB values, escaped to up to 3 KiB in keys.
    let big = "}".repeat(1000);
    for i in 0..5_000 {
        let value = format!("{big}{i}");
        let resp = l
            .should_rate_limit(&req("flood", &[&[("v", &value)]]))
            .await
            .expect("answered");
        assert_eq!(resp.statuses.len(), 1);
        assert!(
            store.bytes() <= cap,
            "{} bytes held after {i} values, cap {cap}",
            store.bytes()
        );
    }
    let text = metrics.render();
    let evicted: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_memory_evictions_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("eviction counter");
    assert!(evicted > 4_000.0, "{evicted} evictions counted");
    // A value just charged is still counted (the newest are kept).
    let last = format!("{big}4999");
    let resp = l
        .should_rate_limit(&req("flood", &[&[("v", &last)]]))
        .await
        .expect("answered");
    assert_eq!(resp.statuses[0].limit_remaining, 3);
}
