//! What an HTTP client behind Envoy sees when tollgate cannot decide: Redis paused past
//! `--redis-timeout` (tollgate's `--failure-mode` answers), then tollgate stopped (Envoy's
//! `failure_mode_deny` alone decides), each within Envoy's filter timeout + 100 ms, with
//! Envoy's own `ratelimit.*` statistics agreeing.

use std::time::Duration;

use tokio::time::Instant;

use super::enforce::get;
use super::fixture::{exclusive, fixture, unique, Failing, FAILURE_FILTER_TIMEOUT};
use crate::support::envoy::RateLimitStats;

/// What one request through a failure listener must get.
struct Want {
    status: u16,
    stats: RateLimitStats,
}

const fn want(status: u16, ok: u64, over_limit: u64, error: u64, allowed: u64) -> Want {
    Want {
        status,
        stats: RateLimitStats {
            ok,
            over_limit,
            error,
            failure_mode_allowed: allowed,
        },
    }
}

/// One request through `port`; checks the status, the time it took and Envoy's stats.
async fn expect(f: &Failing, fail_closed: bool, want: Want, situation: &str) {
    let fx = fixture().await;
    let (port, cluster) = if fail_closed {
        (f.closed_port, &f.closed_cluster)
    } else {
        (f.open_port, &f.open_cluster)
    };
    let what = format!(
        "{situation}, --failure-mode {}, failure_mode_deny {fail_closed}",
        f.mode
    );
    let before = fx.envoy.ratelimit_stats(cluster).await;
    let start = Instant::now();
    let tenant = unique("failing");
    let (status, headers) = get(
        &format!("http://127.0.0.1:{port}/"),
        &[("x-tenant", &tenant)],
    )
    .await;
    let took = start.elapsed();
    let stats = fx.envoy.ratelimit_stats(cluster).await - before;
    assert_eq!(status, want.status, "{what}: {headers:?}");
    assert!(
        took <= FAILURE_FILTER_TIMEOUT + Duration::from_millis(100),
        "{what}: answered after {took:?}"
    );
    assert_eq!(stats, want.stats, "{what}: Envoy's ratelimit stats");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_then_tollgate_stopped() {
    let fx = fixture().await;
    let _alone = exclusive().await;
    for f in &fx.failing {
        for closed in [false, true] {
            expect(f, closed, want(200, 1, 0, 0, 0), "Redis up").await;
        }
    }

    let pid = fx.failing_redis.pid().expect("the failing Redis runs") as i32;
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let paused = async {
        for f in &fx.failing {
            for closed in [false, true] {
                let w = match (f.mode, closed) {
                    // UNAVAILABLE: Envoy's failure_mode_deny decides.
                    ("error", false) => want(200, 0, 0, 1, 1),
                    ("error", true) => want(500, 0, 0, 1, 0),
                    ("allow", _) => want(200, 1, 0, 0, 0),
                    ("deny", _) => want(429, 0, 1, 0, 0),
                    // The in-process limiter answers (3 an hour: this is the first).
                    ("local", _) => want(200, 1, 0, 0, 0),
                    (mode, _) => unreachable!("mode {mode}"),
                };
                expect(f, closed, w, "Redis paused").await;
            }
        }
    };
    let result = tokio::spawn(paused).await;
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    if let Err(panic) = result {
        std::panic::resume_unwind(panic.into_panic());
    }

    for f in &fx.failing {
        if let Some(mut tollgate) = f.tollgate.lock().expect("lock").take() {
            tollgate.stop();
        }
        expect(f, false, want(200, 0, 0, 1, 1), "tollgate stopped").await;
        expect(f, true, want(500, 0, 0, 1, 0), "tollgate stopped").await;
    }
}
