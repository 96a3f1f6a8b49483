//! `--redis-wait-replicas` on a primary with a replica (the partition tests, `tests/partition`,
//! cover the cluster): decisions answered once a replica holds their charges, a replica gone or
//! frozen answered by the failure policy as "not replicated", a setting no primary can meet
//! refused at start; and a Redis that refuses connections named "refused" everywhere.

use std::process::{Command, Stdio};

use super::*;
use crate::support::binary::Binary;
use crate::support::server::{http_client, TempConfig};

/// A primary and its replica, the replica in sync.
fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start_with(&["--hz", "100"], false);
    let replica = RedisServer::start_with(
        &["--replicaof", "127.0.0.1", &primary.port().to_string()],
        false,
    );
    wait_replicas_connected(&primary, 1);
    (primary, replica)
}

/// Waits until `n` replicas are in sync with `primary` (`state=online`; `ROLE` lists only
/// those).
fn wait_replicas_connected(primary: &RedisServer, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = primary.cli(&["INFO", "replication"]);
        let online = info.lines().filter(|l| l.contains("state=online")).count();
        if online == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never {n} replicas online:\n{info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_calls(primary: &RedisServer) -> u64 {
    let stats = primary.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn durable_store(
    url: &str,
    timeout: Duration,
) -> (Arc<RedisStore>, Arc<tollgate::telemetry::metrics::Metrics>) {
    let mut setup = RedisSetup::new(url.to_string(), &ManualClock::new(0));
    setup.timeout = timeout;
    setup.clock = ClockSource::Redis;
    setup.wall = Arc::new(SystemClock);
    setup.local_cache_size = 0;
    setup.wait_replicas = 1;
    let metrics = setup.metrics.clone();
    (Arc::new(setup.connect()), metrics)
}

/// Calls until one is answered as `want` (a decision, or a failure naming "not replicated"),
/// up to `bound`; returns how long it took.
async fn until_answered(
    client: &mut Client,
    tenant: &str,
    want_decided: bool,
    bound: Duration,
) -> Duration {
    let started = Instant::now();
    let mut printed: Option<String> = None;
    loop {
        let r = try_call(client, tenant_req(tenant)).await;
        let done = match &r {
            Ok(r) => want_decided && r.overall_code == OK,
            Err(status) => !want_decided && status.message().contains("not replicated"),
        };
        if done {
            return started.elapsed();
        }
        let said = match &r {
            Ok(r) => format!("{:?}", r.overall_code),
            Err(status) => status.message().to_string(),
        };
        if printed.as_deref() != Some(said.as_str()) {
            println!("{tenant}: at {}: {said}", ms(started.elapsed()));
            printed = Some(said);
        }
        assert!(
            started.elapsed() < bound,
            "not {} within {}: last answer {r:?}",
            if want_decided {
                "decided"
            } else {
                "refused as not replicated"
            },
            ms(bound)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decision_waits_for_its_replica_and_one_that_cannot_is_not_replicated() {
    let (primary, mut replica) = blocking(primary_with_replica);
    let (store, store_metrics) = durable_store(&primary.url(), Duration::from_millis(300));
    let server = start_ready(store, FailureMode::Error).await;
    let mut client = server.client().await;

    // The store's first decision: what it answered until then is printed, not asserted (a
    // store just started may still be connecting its serving threads' clients); every one
    // after it must be decided.
    let first = until_answered(&mut client, "first", true, Duration::from_secs(5)).await;
    println!("first decision after {}", ms(first));
    let before = blocking(|| wait_calls(&primary));
    for i in 0..20 {
        let r = try_call(&mut client, tenant_req(&format!("t{i}"))).await;
        assert!(
            r.as_ref().is_ok_and(|r| r.overall_code == OK),
            "call {i}: {r:?}"
        );
    }
    let waits = blocking(|| wait_calls(&primary)) - before;
    assert!(waits >= 1, "no WAIT reached the primary");
    println!("20 decisions, {waits} WAIT calls on the primary");

    // The replica frozen (SIGSTOP): the primary still counts it as connected, so the call
    // runs and its WAIT falls short.
    let pid = replica.pid().expect("replica pid").to_string();
    blocking(|| Command::new("kill").args(["-STOP", &pid]).status()).expect("kill -STOP");
    let r = try_call(&mut client, tenant_req("frozen")).await;
    let status = r.expect_err("a call its replica never acknowledged must not be decided");
    assert!(
        status
            .message()
            .contains("not replicated: 0 of 1 replicas acknowledged in time"),
        "{status:?}"
    );
    blocking(|| Command::new("kill").args(["-CONT", &pid]).status()).expect("kill -CONT");
    let resumed = until_answered(&mut client, "thawed", true, Duration::from_secs(5)).await;
    println!("replica thawed: decisions again after {}", ms(resumed));

    // The replica gone: upkeep counts 0 connected, and calls fail at once, charging nothing.
    blocking(|| replica.stop());
    let refused = until_answered(&mut client, "gone", false, Duration::from_secs(5)).await;
    println!(
        "replica killed: refused as not replicated after {}",
        ms(refused)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let resp = http_client().get(server.http_url("/readyz")).send().await;
        let resp = resp.expect("/readyz");
        let code = resp.status();
        let text = resp.text().await.unwrap_or_default();
        assert_eq!(
            code, 200,
            "readiness stays ready while replicas are short: {text}"
        );
        if text.contains("0 of 1 replica(s) connected") {
            break;
        }
        assert!(Instant::now() < deadline, "/readyz never warned: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = body(server.http_url("/metrics")).await;
    assert_eq!(store_metrics.store_replicas_short.get(), 1);
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "tollgate_store_failures_total{policy=\"error\",cause=\"not_replicated\"}"
        ) && !l.ends_with(" 0")),
        "{metrics}"
    );
    blocking(|| {
        replica.restart();
        wait_replicas_connected(&primary, 1);
    });
    let back = until_answered(&mut client, "back", true, Duration::from_secs(5)).await;
    println!("replica back: decisions again after {}", ms(back));
    server.stop().await;
}

/// `cmdstat_<command>` calls summed over `ports`.
fn calls(cluster: &RedisCluster, ports: &[u16], command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    ports
        .iter()
        .map(|&p| {
            cluster
                .cli(p, &["INFO", "commandstats"])
                .lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// On a cluster, calls rarely share a hash slot, so a `WAIT` per script call was a `WAIT` per
/// decision; one `WAIT` per connection covers every call sent on it before (group commit), so
/// decisions in flight together share it, whatever their hash slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_wait_covers_the_calls_in_flight_to_a_node_across_hash_slots() {
    let cluster = blocking(|| RedisCluster::start(3, 1));
    let (store, _) = durable_store(&cluster.seed_url(), Duration::from_millis(500));
    let server = start_ready(store, FailureMode::Error).await;
    let masters = cluster.masters();
    let (waits0, scripts0) = (
        calls(&cluster, &masters, "wait"),
        calls(&cluster, &masters, "evalsha"),
    );
    let callers = (0..48).map(|c| {
        let server = &server;
        async move {
            let mut client = server.client().await;
            let mut failed = Vec::new();
            for i in 0..25 {
                let r = try_call(&mut client, tenant_req(&format!("c{c}-{i}"))).await;
                if !r.as_ref().is_ok_and(|r| r.overall_code == OK) {
                    failed.push(format!("{r:?}"));
                }
            }
            failed
        }
    });
    let failed: Vec<String> = futures::future::join_all(callers)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 1200 not decided: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    let waits = calls(&cluster, &masters, "wait") - waits0;
    let scripts = calls(&cluster, &masters, "evalsha") - scripts0;
    println!("1200 decisions over 48 callers: {scripts} EVALSHA, {waits} WAIT on the primaries");
    assert!(waits >= 1, "no WAIT reached a primary");
    assert!(
        waits * 3 <= scripts * 2,
        "{waits} WAITs for {scripts} script calls: calls in flight together did not share one"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_setting_no_primary_can_meet_is_refused_at_start() {
    let (primary, _replica) = blocking(primary_with_replica);
    let config = TempConfig::new(ROOMY_YAML);
    let [grpc, http] = common::ports::<2>();
    let out = blocking(|| {
        Command::new(crate::support::binary::BIN)
            .args([
                "serve",
                "--config",
                &config.path().to_string_lossy(),
                "--grpc-addr",
                &format!("127.0.0.1:{grpc}"),
                "--http-addr",
                &format!("127.0.0.1:{http}"),
                "--redis-url",
                &primary.url(),
                "--redis-wait-replicas",
                "2",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run tollgate")
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started anyway: {stderr}");
    assert!(
        stderr.contains(&format!(
            "--redis-wait-replicas 2: redis 127.0.0.1:{} has 1 replica(s)",
            primary.port()
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_connection_is_named_refused_everywhere() {
    let config = TempConfig::new(ROOMY_YAML);
    let log = config.dir.join("tollgate.log");
    let nothing = common::free_port();
    let url = format!("redis://127.0.0.1:{nothing}");
    let server = Binary::serve(config.path(), &["--redis-url", &url], Some(log.clone())).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let readyz = body(format!("{}/readyz", server.http_url)).await;
    let want = format!("redis 127.0.0.1:{nothing}: connection refused");
    assert!(readyz.contains(&want), "/readyz: {readyz}");
    // A decision: answered by the failure policy (error), its cause counted as "refused".
    let mut client = Client::new(common::channel(server.grpc_url[7..].parse().unwrap()).await);
    let status = try_call(&mut client, tenant_req("a"))
        .await
        .expect_err("no store: the error policy answers");
    assert!(status.message().contains(&want), "{status:?}");
    let metrics = body(format!("{}/metrics", server.http_url)).await;
    for cause in ["refused", "connection"] {
        let line = format!("tollgate_store_failures_total{{policy=\"error\",cause=\"{cause}\"}} 1");
        assert!(metrics.contains(&line), "no `{line}` in:\n{metrics}");
    }
    let logged = server.log();
    for line in [
        "redis still unreachable",
        "readiness changed",
        "store failed",
    ] {
        let found = logged
            .lines()
            .find(|l| l.contains(line))
            .unwrap_or_else(|| panic!("no `{line}` line in:\n{logged}"));
        assert!(found.contains(&want), "{found}");
    }
    assert!(
        !logged.contains("closed or reset"),
        "a refused connection named otherwise:\n{logged}"
    );
}

/// A store on `redis` with the local cache off, its metrics, and a server on it.
async fn watched(url: &str) -> (TestServer, Arc<tollgate::telemetry::metrics::Metrics>) {
    let mut setup = RedisSetup::new(url.to_string(), &ManualClock::new(0));
    setup.clock = ClockSource::Redis;
    setup.wall = Arc::new(SystemClock);
    let metrics = setup.metrics.clone();
    let server = start_ready(Arc::new(setup.connect()), FailureMode::Error).await;
    (server, metrics)
}

/// Waits until upkeep has written the marker on every primary (`ports`).
fn wait_markers(ports: &[u16]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ports.iter().all(|&p| {
        !crate::support::redis::cli_on(p, &["--scan", "--pattern", "*marker:{m*"])
            .trim()
            .is_empty()
    }) {
        assert!(
            Instant::now() < deadline,
            "markers never written on {ports:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `/readyz`'s body.
async fn readyz(server: &TestServer) -> String {
    body(server.http_url("/readyz")).await
}

/// A GET's body (empty when it has none).
async fn body(url: String) -> String {
    let resp = http_client().get(&url).send().await;
    let resp = resp.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    resp.text().await.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restarted_without_persistence_is_reported_as_data_lost() {
    let mut redis = blocking(RedisServer::start);
    let (server, metrics) = watched(&redis.url()).await;
    blocking(|| wait_markers(&[redis.port()]));
    blocking(|| redis.restart());
    let deadline = Instant::now() + Duration::from_secs(8);
    while metrics.store_data_lost.get() == 0 {
        assert!(
            Instant::now() < deadline,
            "the empty restart was never reported"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = readyz(&server).await;
    assert!(
        body.starts_with("OK") && body.contains("came back without its data"),
        "{body}"
    );
    assert_eq!(metrics.store_data_lost.get(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_with_aof_and_a_clean_failover_are_not_data_lost() {
    let mut aof = blocking(|| {
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"], false)
    });
    let cluster = blocking(|| RedisCluster::start(3, 1));
    let (aof_server, aof_metrics) = watched(&aof.url()).await;
    let (cluster_server, cluster_metrics) = watched(&cluster.seed_url()).await;
    blocking(|| {
        wait_markers(&[aof.port()]);
        wait_markers(&cluster.masters());
        aof.restart();
        let replica = cluster.replicas()[0];
        cluster.failover(replica);
    });
    // Several marker rounds (every ~2 s) after both.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(aof_metrics.store_data_lost.get(), 0, "AOF restart");
    assert_eq!(cluster_metrics.store_data_lost.get(), 0, "clean failover");
    for server in [&aof_server, &cluster_server] {
        let body = readyz(server).await;
        assert!(!body.contains("without its data"), "{body}");
    }
    aof_server.stop().await;
    cluster_server.stop().await;
}
