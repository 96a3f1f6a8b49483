//! A Redis primary paused (SIGSTOP) for longer than the deadline while two tollgate instances
//! share one limit: calls during the pause fail per the policy within the deadline, decisions
//! resume when it continues, and the limit admits exactly its count — the scripts that ran late,
//! after their callers had been answered UNAVAILABLE, have their charges refunded.

use super::*;
use crate::support::kit::avoid_window_edge;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_primary_fails_calls_per_policy_and_admits_exactly() {
    const LIMIT: usize = 1000;
    let redis = blocking(RedisServer::start);
    let deadline = Duration::from_millis(200);
    let a = start_ready(
        redis_store(&redis.url(), "pause:", deadline),
        FailureMode::Error,
    )
    .await;
    let b = start_ready(
        redis_store(&redis.url(), "pause:", deadline),
        FailureMode::Error,
    )
    .await;
    // The whole run stays in one fixed one-minute window.
    avoid_window_edge(Duration::from_secs(60), Duration::from_secs(15)).await;

    fn thousand(_: usize, _: usize) -> RateLimitRequest {
        common::req("faults", &[&[("thousand", "k")]])
    }
    let pause = Duration::from_millis(1500);
    let ta = Traffic::start(&a, 2, Duration::from_millis(10), thousand).await;
    let tb = Traffic::start(&b, 2, Duration::from_millis(10), thousand).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = redis.pid().expect("redis runs");
    let stopped = Instant::now();
    assert!(kill(pid, "-STOP"), "SIGSTOP redis");
    tokio::time::sleep(pause).await;
    let continued = Instant::now();
    assert!(kill(pid, "-CONT"), "SIGCONT redis");
    // ~400 calls a second: the limit is used up well before the traffic stops.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut samples = ta.finish().await;
    samples.extend(tb.finish().await);

    let ok = samples
        .iter()
        .filter(|s| matches!(&s.result, Ok(r) if r.overall_code == OK))
        .count();
    let over = samples
        .iter()
        .filter(|s| matches!(&s.result, Ok(r) if r.overall_code == OVER_LIMIT))
        .count();
    let during: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.answered_at() > stopped && s.sent < continued)
        .collect();
    let not_per_policy = during
        .iter()
        .filter(|s| !s.decided() && !per_policy(FailureMode::Error, &s.result))
        .count();
    let slowest = during.iter().map(|s| s.latency).max().unwrap_or_default();
    let resumed = samples
        .iter()
        .filter(|s| s.sent >= continued && s.decided())
        .map(|s| s.answered_at().duration_since(continued))
        .min();
    println!(
        "pause: primary SIGSTOPped {} (deadline {}), two instances: {} calls failed during it \
         (slowest {}), first decision {} after SIGCONT; {ok} admitted of a limit of {LIMIT} \
         ({over} over)",
        ms(pause),
        ms(deadline),
        during.iter().filter(|s| !s.decided()).count(),
        ms(slowest),
        resumed.map_or("never".into(), ms),
    );
    assert_eq!(
        not_per_policy, 0,
        "calls during the pause must fail as UNAVAILABLE"
    );
    assert!(
        slowest <= deadline + Duration::from_millis(300),
        "a call during the pause took {}",
        ms(slowest)
    );
    assert!(
        resumed.is_some_and(|r| r <= Duration::from_secs(1)),
        "decisions resumed {resumed:?} after SIGCONT"
    );
    assert!(over > 0, "the traffic never used the limit up");
    assert_eq!(ok, LIMIT, "admitted {ok} of a limit of {LIMIT}");
    a.stop().await;
    b.stop().await;
}

fn kill(pid: u32, signal: &str) -> bool {
    std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}
