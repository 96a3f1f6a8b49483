//! One log line per Redis event (issue 58): a disconnect, a reconnect, a failover and a lost
//! marker each give one line of tollgate's, naming the node and the cause, and fred's own
//! lines stay below WARN by default (a disconnect used to log three of fred's WARN lines
//! besides tollgate's two: `redis unreachable` and `readiness changed`). Read from the real
//! binary's JSON log.

use std::time::Duration;

use crate::support::binary::Binary;
use crate::support::kit::blocking;
use crate::support::redis::{RedisCluster, RedisServer};
use crate::support::server::TempConfig;

const CONFIG: &str = "
domain: lines
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
";

/// The log's lines from `from` on, as (level, target, message, fields as text).
fn lines(log: &str, from: usize) -> Vec<(String, String, String, String)> {
    log.lines()
        .skip(from)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let field = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let fields = v["fields"].clone();
            let message = fields["message"].as_str().unwrap_or_default().to_string();
            (field("level"), field("target"), message, fields.to_string())
        })
        .collect()
}

/// Lines at WARN or above, or from fred at any level.
fn loud(lines: &[(String, String, String, String)]) -> Vec<String> {
    lines
        .iter()
        .filter(|(level, target, ..)| {
            level == "WARN" || level == "ERROR" || target.starts_with("fred")
        })
        .map(|(level, target, message, fields)| format!("{level} {target}: {message} {fields}"))
        .collect()
}

async fn wait_for(
    binary: &Binary,
    from: usize,
    what: &str,
) -> Vec<(String, String, String, String)> {
    // A failover is seen when fred re-reads the topology: on a redirect, or every 10 s.
    for _ in 0..250 {
        let seen = lines(&binary.log(), from);
        if seen.iter().any(|(_, _, m, _)| m.contains(what)) {
            // Whatever else this event logs comes within the next upkeep rounds.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return lines(&binary.log(), from);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no line '{what}' in:\n{}", binary.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_a_reconnect_and_a_lost_marker_each_log_one_line() {
    let mut redis = blocking(RedisServer::start);
    let config = TempConfig::new(CONFIG);
    let dir = config.path().parent().unwrap().to_path_buf();
    let url = redis.url();
    let mut tollgate = Binary::serve(
        config.path(),
        &["--redis-url", &url, "--log-format", "json"],
        Some(dir.join("lines.log")),
    )
    .await;
    tollgate.wait_ready().await;
    // The marker is written within a few seconds of the start.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = format!("redis 127.0.0.1:{}", redis.port());

    let from = tollgate.log().lines().count();
    blocking(|| redis.stop());
    let seen = wait_for(&tollgate, from, "redis unreachable").await;
    let loud_lines = loud(&seen);
    assert_eq!(loud_lines.len(), 1, "a disconnect: {loud_lines:#?}");
    assert!(
        loud_lines[0].contains(&node) && loud_lines[0].contains("refused"),
        "names the node and the cause: {}",
        loud_lines[0]
    );

    // Back, empty (no persistence): reachable again, and the marker is gone.
    let from = tollgate.log().lines().count();
    blocking(|| redis.restart());
    let seen = wait_for(&tollgate, from, "came back without its data").await;
    let reachable: Vec<_> = seen
        .iter()
        .filter(|(_, _, m, _)| m.contains("redis reachable"))
        .collect();
    assert_eq!(reachable.len(), 1, "a reconnect: {seen:#?}");
    assert!(reachable[0].3.contains(&node), "{reachable:?}");
    let loud_lines = loud(&seen);
    assert_eq!(loud_lines.len(), 1, "a lost marker: {loud_lines:#?}");
    assert!(loud_lines[0].contains(&node), "{}", loud_lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_logs_one_line() {
    let cluster = blocking(|| RedisCluster::start(3, 1));
    let config = TempConfig::new(CONFIG);
    let dir = config.path().parent().unwrap().to_path_buf();
    let url = cluster.seed_url();
    let mut tollgate = Binary::serve(
        config.path(),
        &["--redis-url", &url, "--log-format", "json"],
        Some(dir.join("failover.log")),
    )
    .await;
    tollgate.wait_ready().await;
    let replica = cluster.replicas()[0];
    let primary = cluster.master_of(replica);
    let from = tollgate.log().lines().count();
    blocking(|| cluster.failover(replica));
    let seen = wait_for(&tollgate, from, "redis primaries changed").await;
    let loud_lines = loud(&seen);
    // One line for the failover. On a busy host the probe of the primary stepping down may
    // time out first: that is an event of its own (unreachable, then reachable), never one
    // of fred's lines.
    let (changed, other): (Vec<&String>, Vec<&String>) = loud_lines
        .iter()
        .partition(|l| l.contains("redis primaries changed"));
    assert_eq!(changed.len(), 1, "a failover: {loud_lines:#?}");
    assert!(
        other.iter().all(
            |l| l.contains("tollgate::store::redis::connection::health: redis ")
                && l.contains("unreachable")
        ),
        "a failover: {loud_lines:#?}"
    );
    assert!(
        changed[0].contains(&format!(":{primary}")) && changed[0].contains(&format!(":{replica}")),
        "names the old primary and the new one: {}",
        changed[0]
    );
}
