//! A global limit's home moves (issue 60 part 3, docs/multi-region.md, "Moving home"): `eu`
//! and `us`, each a Redis and a tollgate, each reaching the other's Redis through the test's
//! delaying proxy (40 ms each way); a limit of 300 per 2 s window homed in eu, both regions
//! asking 150 a second. 6 s in, `tollgate move-home` moves the authority to us's Redis; eu's
//! config names us as home a second later, us's two seconds after that (a rollout, not a
//! moment). Held:
//!
//! - the move is done once: a second run refuses (the new home holds an authority);
//! - no window admits more than the limit, before, during or after the move: the old home,
//!   marked moved, grants nothing, and the new one goes on from every count it had;
//! - a region whose config still names the old home is answered (granted nothing), so it does
//!   not count itself cut off: no safe share is spent, and it logs what to change;
//! - after the rollout both regions are granted by the new home.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::RateLimitResponse;

use super::global_regions::{
    admitted_by_window, now_us, paced, region_logs, regions_alone, start_regions, RegionSpec,
};
use super::three_regions::safe_windows;
use crate::support::binary::{Binary, BIN};
use crate::support::delay::DelayProxy;
use crate::support::redis::{cli_on, RedisServer};
use crate::support::server::TempConfig;

const LIMIT: u64 = 300;
const WINDOW_US: u64 = 2_000_000;

fn config(home: &str) -> String {
    format!(
        "
domain: llm
descriptors:
  - key: provider
    value: openai
    rate_limit:
      unit: second
      window: 2s
      requests_per_unit: 300
      shared: true
      global:
        home: {home}
        regions: [eu, us]
        on_partition: safe_share
        safe_share: 0.1
"
    )
}

/// `tollgate move-home` from eu's Redis to us's: its exit status and output.
fn move_home(from: u16, to: u16) -> (bool, String) {
    let out = std::process::Command::new(BIN)
        .args([
            "move-home",
            "--from-redis",
            &format!("redis://127.0.0.1:{from}"),
            "--to-redis",
            &format!("redis://127.0.0.1:{to}"),
            "--to-region",
            "us",
        ])
        .output()
        .expect("run tollgate move-home");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn authority(port: u16) -> serde_json::Value {
    let key = cli_on(port, &["--scan", "--pattern", "*|authority"]);
    let key = key.lines().next().expect("an authority key").to_string();
    serde_json::from_str(&cli_on(port, &["GET", &key])).expect("the authority's state")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn home_moves_without_granting_a_window_twice() {
    let _alone = regions_alone().await;
    let names = ["eu", "us"];
    let redis: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let (eu_redis, us_redis) = (redis[0].port(), redis[1].port());
    let to_eu = DelayProxy::start("127.0.0.1", eu_redis, Duration::from_millis(40)).await;
    let to_us = DelayProxy::start("127.0.0.1", us_redis, Duration::from_millis(40)).await;
    let configs = [
        TempConfig::new(&config("eu")),
        TempConfig::new(&config("eu")),
    ];
    let specs: Vec<RegionSpec> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let other = [("us", to_us.port), ("eu", to_eu.port)][i];
            RegionSpec {
                name,
                config: &configs[i],
                redis_url: redis[i].url(),
                extra: vec![
                    "--config-reload-interval".into(),
                    "200ms".into(),
                    "--region-redis".into(),
                    format!("{}=redis://127.0.0.1:{}", other.0, other.1),
                ],
            }
        })
        .collect();
    let tollgates = start_regions(&specs).await;
    let logs = |tollgates: &[Binary]| region_logs(&names, tollgates);

    tokio::time::sleep(Duration::from_micros(WINDOW_US - now_us() % WINDOW_US)).await;
    let begin = Instant::now();
    let total = Duration::from_secs(15);
    let ok = Arc::new(Mutex::new(vec![0u64; 2]));
    let loads: Vec<_> = tollgates
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let url = format!("http://127.0.0.1:{}", t.grpc_port());
            let ok = ok.clone();
            let answered = move |_, _, r: RateLimitResponse| {
                if r.overall_code == Code::Ok as i32 {
                    ok.lock().unwrap()[i] += 1;
                }
            };
            tokio::spawn(paced(url, begin, total, |_| 150, answered))
        })
        .collect();

    tokio::time::sleep_until((begin + Duration::from_secs(6)).into()).await;
    let (moved, said) = tokio::task::spawn_blocking(move || move_home(eu_redis, us_redis))
        .await
        .expect("move-home");
    assert!(moved, "tollgate move-home: {said}");
    assert!(said.contains("moved tollgate:{g|"), "{said}");
    let (again, said_again) = move_home(eu_redis, us_redis);
    assert!(
        !again && said_again.contains("already holds an authority"),
        "a second move is refused: {said_again}"
    );
    tokio::time::sleep_until((begin + Duration::from_secs(7)).into()).await;
    configs[0].write(&config("us"));
    tokio::time::sleep_until((begin + Duration::from_secs(9)).into()).await;
    let before_us_moves = ok.lock().unwrap().clone();
    configs[1].write(&config("us"));
    let rolled_out = now_us() / WINDOW_US + 1;
    for l in loads {
        l.await.expect("load");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let by_window = admitted_by_window(&[eu_redis, us_redis]);
    let old = authority(eu_redis);
    let new = authority(us_redis);
    let report = format!(
        "admitted by window {by_window:?}; OK answers {:?} (at 9 s {before_us_moves:?}); old \
         home {old}; new home {new}; {}",
        ok.lock().unwrap(),
        logs(&tollgates)
    );
    println!(
        "admitted by window {by_window:?} (rolled out from {rolled_out}); old home issued {}, \
         new home issued {}",
        old["issued"], new["issued"]
    );
    assert_eq!(
        old["moved_to"], "us",
        "the old home is marked moved: {report}"
    );
    assert!(
        new.get("moved_to").is_none() && new["issued"].as_u64().unwrap_or(0) > 0,
        "the new home grants: {report}"
    );
    assert!(
        by_window.values().all(|&n| n <= LIMIT),
        "no window over the limit across the move: {report}"
    );
    let after: Vec<u64> = by_window.range(rolled_out + 1..).map(|(_, &n)| n).collect();
    assert!(
        after.len() >= 2 && after[..after.len() - 1].iter().all(|&n| n >= LIMIT / 2),
        "after the rollout the new home grants the limit: {after:?}; {report}"
    );
    for port in [eu_redis, us_redis] {
        let safe = safe_windows(port);
        assert!(
            safe.is_empty(),
            "no region counted itself cut off during the move: {safe:?}; {report}"
        );
    }
    assert!(
        tollgates[1].log().contains("moved from eu to us"),
        "us, still asking eu, says what to change: {report}"
    );
}
