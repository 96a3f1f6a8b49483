//! Sharing a pool through Envoy. Waiting instead of refusing: a burst of 20 on a token bucket of 10 a second
//! (burst 10) with `max_wait: 2s`, behind Envoy's ratelimit filter with a 3 s timeout, gets 20 ×
//! 200 — 10 at once, then 10 about 100 ms apart — not 10 × 429. Envoy's `grpc-timeout` (its
//! filter timeout) bounds each wait. Guaranteed shares: while a batch class floods a pool, an
//! interactive class keeps its guaranteed share.

use std::time::{Duration, Instant};

use super::enforce::{get, within_one_hour};
use super::fixture::{fixture, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_through_envoy_is_held_until_it_fits_not_refused() {
    let fx = fixture().await;
    for side in &fx.sides {
        let name = side.name();
        let key = unique("wait");
        let started = Instant::now();
        let calls = (0..20).map(|_| {
            let url = side.url("/wait");
            let key = key.clone();
            tokio::spawn(async move {
                let (status, _) = get(&url, &[("x-wait-key", &key)]).await;
                (status, started.elapsed())
            })
        });
        let mut answers = Vec::new();
        for c in calls.collect::<Vec<_>>() {
            answers.push(c.await.expect("a caller"));
        }
        assert!(
            answers.iter().all(|(status, _)| *status == 200),
            "[{name}] every request of the burst is served: {answers:?}"
        );
        let mut took: Vec<Duration> = answers.iter().map(|(_, t)| *t).collect();
        took.sort();
        // The bucket refills while the burst is sent: the k-th held answer (k = 1..10) is due
        // k × 100 ms after the bucket ran dry, which is at most the sending time after `started`.
        let sent = took[9];
        assert!(
            sent < Duration::from_millis(600),
            "[{name}] the first 10 at once: {took:?}"
        );
        for k in 1..=10u32 {
            let t = took[9 + k as usize];
            let due = Duration::from_millis(100) * k;
            assert!(
                t + Duration::from_millis(5) >= due.saturating_sub(sent),
                "[{name}] answer {k} after the burst came at {t:?}, before its place {due:?}: {took:?}"
            );
            assert!(
                t < due + Duration::from_millis(700),
                "[{name}] answer {k} after the burst came at {t:?}, long after its place {due:?}: {took:?}"
            );
        }
        let spread = took[19] - took[10];
        assert!(
            spread >= Duration::from_millis(700),
            "[{name}] the held ones are spread ~100 ms apart, not answered together: {took:?}"
        );
    }
}

/// A pool of 20 an hour: interactive is guaranteed 10, batch 5, and a class past its guarantee
/// borrows while the pool stays within 10. Batch floods first and stops at 10 (its 5, then
/// borrowing); interactive then gets its full 10; batch nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_class_keeps_its_share_while_batch_floods_the_pool() {
    let fx = fixture().await;
    within_one_hour().await;
    for side in &fx.sides {
        let name = side.name();
        let send = |class: &'static str, n: usize| {
            let url = side.url("/pool");
            async move {
                let mut admitted = 0;
                for _ in 0..n {
                    let (status, _) =
                        get(&url, &[("x-pool", "gpt-4o"), ("x-priority", class)]).await;
                    assert!(status == 200 || status == 429, "[{name}] status {status}");
                    admitted += usize::from(status == 200);
                }
                admitted
            }
        };
        assert_eq!(
            send("batch", 30).await,
            10,
            "[{name}] batch: 5, then borrowing to 10"
        );
        assert_eq!(
            send("interactive", 15).await,
            10,
            "[{name}] interactive keeps its 10"
        );
        assert_eq!(send("batch", 5).await, 0, "[{name}] the pool is spent");
    }
}
