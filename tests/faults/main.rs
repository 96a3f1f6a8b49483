//! Redis faults against real `redis-server` processes (single node and a 3 + 3 cluster, started
//! here on free loopback ports) while real tollgate servers run in-process and real gRPC/HTTP
//! clients call them: script caches flushed mid-traffic, a primary killed (replica failover),
//! a full outage under each failure policy, startup while Redis is down, and a whole cluster
//! going away and coming back, and fred's router given a command it cannot route. tollgate is
//! never restarted; every wait is bounded.
//!
//! Measured times are printed (run with `--nocapture` to see them).

#[path = "../support/mod.rs"]
mod support;

mod durability;
mod fred_routing;
mod log_lines;
mod matrix;
mod pause;
mod sentinel;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::kit::{blocking, RedisSetup};
use support::redis::{RedisCluster, RedisServer};
use support::server::{self as common, bounded, try_call, TestServer, OK, OVER_LIMIT};
use tollgate::base::clock::{ManualClock, SystemClock};
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::service::settings::{FailureMode, Settings};
use tollgate::store::redis::options::{ClockSource, KEY_FORMAT};
use tollgate::store::redis::RedisStore;
use tollgate::store::Store;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

type Client = RateLimitServiceClient<Channel>;

/// How fast readiness must follow Redis going away or coming back.
const READINESS_BOUND: Duration = Duration::from_secs(2);
/// How long a wait may go on past its bound, so a late event is still measured and reported.
const OVERRUN: Duration = Duration::from_secs(8);
const FAILURE_HEADER: &str = "x-tollgate-store-failure";
/// The decision script as Redis loads it.
fn decide_lua() -> &'static str {
    tollgate::store::redis::scripts::script::Script::tollgate().lua
}

/// A large limit: traffic is never denied by it, so every answer that is not OK is a failure.
const ROOMY_YAML: &str = r#"
domain: faults
descriptors:
  - key: tenant
    rate_limits:
      - {name: tenant, unit: minute, requests_per_unit: 100000000}
      - {name: global, unit: minute, requests_per_unit: 100000000, shared: true}
  - key: tiny
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: thousand
    rate_limit: {unit: minute, requests_per_unit: 1000}
"#;

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// A Redis store on Redis `TIME` with the local cache off: every decision goes to Redis,
/// which is what these tests exercise.
fn redis_store(url: &str, key_prefix: &str, timeout: Duration) -> Arc<RedisStore> {
    let mut setup = RedisSetup::new(url.to_string(), &ManualClock::new(0));
    setup.key_prefix = key_prefix.to_string();
    setup.timeout = timeout;
    setup.clock = ClockSource::Redis;
    setup.wall = Arc::new(SystemClock);
    setup.local_cache_size = 0;
    Arc::new(setup.connect())
}

/// The failure policy, with its marker in client-visible headers too (where these tests
/// look for it).
fn settings(failure_mode: FailureMode) -> Settings {
    Settings {
        failure_mode,
        store_failure_header: true,
        ..Settings::default()
    }
}

/// A server on `store`, waited for until SERVING.
async fn start_ready<S: Store>(store: Arc<S>, failure_mode: FailureMode) -> TestServer {
    common::start_with_store(ROOMY_YAML, settings(failure_mode).into(), store).await
}

/// A server on `store`, without waiting for it to become ready.
async fn start_unready<S: Store>(store: Arc<S>, failure_mode: FailureMode) -> TestServer {
    common::start_unready(ROOMY_YAML, settings(failure_mode).into(), store).await
}

fn tenant_req(tenant: &str) -> RateLimitRequest {
    common::req("faults", &[&[("tenant", tenant)]])
}

/// gRPC health of `ratelimit` and `/readyz`, sampled together.
struct Readiness {
    health: HealthClient<Channel>,
    http: reqwest::Client,
    readyz: String,
}

impl Readiness {
    async fn of(server: &TestServer) -> Readiness {
        Readiness {
            health: server.health().await,
            http: common::http_client(),
            readyz: server.http_url("/readyz"),
        }
    }

    /// (gRPC health says SERVING, `/readyz` says 200).
    async fn sample(&mut self) -> (bool, bool) {
        let grpc = matches!(
            common::health_status(&mut self.health, "ratelimit").await,
            Ok(ServingStatus::Serving)
        );
        let http = match self.http.get(&self.readyz).send().await {
            Ok(resp) => resp.status() == reqwest::StatusCode::OK,
            Err(_) => false,
        };
        (grpc, http)
    }

    /// Polls until both probes say `serving`; returns the time since `since`. Panics if that
    /// is longer than `bound` (after polling `OVERRUN` longer, to report how late it was).
    async fn wait(
        &mut self,
        serving: bool,
        since: Instant,
        bound: Duration,
        what: &str,
    ) -> Duration {
        let want = if serving { "SERVING" } else { "NOT_SERVING" };
        loop {
            let (grpc, http) = self.sample().await;
            let elapsed = since.elapsed();
            if grpc == serving && http == serving {
                assert!(
                    elapsed <= bound,
                    "{what}: readiness became {want} after {}, bound {}",
                    ms(elapsed),
                    ms(bound)
                );
                return elapsed;
            }
            assert!(
                elapsed <= bound + OVERRUN,
                "{what}: readiness not {want} after {} (gRPC serving: {grpc}, /readyz 200: \
                 {http}), bound {}",
                ms(elapsed),
                ms(bound)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One call made by [`Traffic`].
struct Sample {
    sent: Instant,
    latency: Duration,
    result: Result<RateLimitResponse, tonic::Status>,
}

impl Sample {
    fn answered_at(&self) -> Instant {
        self.sent + self.latency
    }

    /// A decision (OK or OVER_LIMIT) that did not come from the failure policy.
    fn decided(&self) -> bool {
        match &self.result {
            Ok(resp) => {
                (resp.overall_code == OK || resp.overall_code == OVER_LIMIT)
                    && !resp
                        .response_headers_to_add
                        .iter()
                        .any(|h| h.key == FAILURE_HEADER)
            }
            Err(_) => false,
        }
    }

    fn describe(&self) -> String {
        match &self.result {
            Ok(resp) => format!(
                "overall {} headers {:?}",
                resp.overall_code, resp.response_headers_to_add
            ),
            Err(s) => format!("{:?}: {}", s.code(), s.message()),
        }
    }
}

/// Continuous calls from several tasks until stopped.
struct Traffic {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Sample>>>,
}

impl Traffic {
    /// `tasks` loops, each on its own connection, calling `make(n)` for its n-th call and
    /// pausing `pause` between calls.
    async fn start(
        server: &TestServer,
        tasks: usize,
        pause: Duration,
        make: fn(usize, usize) -> RateLimitRequest,
    ) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for task in 0..tasks {
            let mut client: Client = server.client().await;
            let stop = stop.clone();
            handles.push(tokio::spawn(async move {
                let mut samples = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let sent = Instant::now();
                    let result = try_call(&mut client, make(task, n)).await;
                    samples.push(Sample {
                        sent,
                        latency: sent.elapsed(),
                        result,
                    });
                    n += 1;
                    tokio::time::sleep(pause).await;
                }
                samples
            }));
        }
        Traffic {
            stop,
            tasks: handles,
        }
    }

    /// Stops the calls; returns every sample in the order sent.
    async fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(
                bounded("traffic task", t)
                    .await
                    .expect("traffic task panicked"),
            );
        }
        all.sort_by_key(|s| s.sent);
        all
    }
}

/// A mix that runs both scripts: a tenant and its shared limit (two slots), a tiny limit that
/// is soon over, and both in one request (the over one makes the others' charges be refunded).
fn mixed_request(task: usize, n: usize) -> RateLimitRequest {
    let tenant = format!("t{}", (task * 7 + n) % 5);
    let tiny = format!("x{}", n % 3);
    match n % 3 {
        0 => tenant_req(&tenant),
        1 => common::req("faults", &[&[("tiny", &tiny)]]),
        _ => common::req("faults", &[&[("tenant", &tenant)], &[("tiny", &tiny)]]),
    }
}

/// Flushes the script caches `flushes` times in the middle of continuous traffic and checks
/// that no call failed and that tollgate loaded the scripts again.
async fn script_flush_mid_traffic(
    url: &str,
    what: &str,
    flush_all: impl Fn(),
    decide_loaded_everywhere: impl Fn() -> bool,
) {
    let store = redis_store(url, "flush:", Duration::from_millis(500));
    let server = start_ready(store, FailureMode::Error).await;
    let traffic = Traffic::start(&server, 6, Duration::from_millis(2), mixed_request).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let flushes = 5;
    let mut flushed_at = Vec::new();
    for _ in 0..flushes {
        blocking(&flush_all);
        flushed_at.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let samples = traffic.finish().await;

    let failed: Vec<&Sample> = samples.iter().filter(|s| !s.decided()).collect();
    let after_last = samples
        .iter()
        .filter(|s| s.sent >= flushed_at[flushes - 1])
        .count();
    let max_latency = samples.iter().map(|s| s.latency).max().unwrap_or_default();
    println!(
        "[{what}] SCRIPT FLUSH x{flushes} under traffic: {} calls, {} failed, {after_last} after \
         the last flush, max latency {}",
        samples.len(),
        failed.len(),
        ms(max_latency)
    );
    assert!(
        failed.is_empty(),
        "[{what}] {} of {} calls were not decided; first: {}",
        failed.len(),
        samples.len(),
        failed[0].describe()
    );
    assert!(
        after_last >= 20,
        "[{what}] only {after_last} calls after the last flush: traffic did not flow"
    );
    assert!(
        blocking(&decide_loaded_everywhere),
        "[{what}] decide.lua is not loaded on the primaries after the flushes"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_on_a_single_node_fails_no_decision() {
    let redis = blocking(RedisServer::start);
    let sha = fred::util::sha1_hash(decide_lua());
    script_flush_mid_traffic(
        &redis.url(),
        "single node",
        || assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK"),
        || redis.cli(&["SCRIPT", "EXISTS", &sha]) == "1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_on_every_cluster_node_fails_no_decision() {
    let cluster = blocking(|| RedisCluster::start(3, 1));
    let sha = fred::util::sha1_hash(decide_lua());
    script_flush_mid_traffic(
        &cluster.seed_url(),
        "cluster",
        || cluster.script_flush_all(),
        || {
            cluster
                .masters()
                .iter()
                .all(|&p| cluster.cli(p, &["SCRIPT", "EXISTS", &sha]) == "1")
        },
    )
    .await;
}

/// Whether `port` calls itself a primary and its cluster is ok.
fn promoted(cluster: &RedisCluster, port: u16) -> bool {
    cluster
        .cli(port, &["ROLE"])
        .lines()
        .next()
        .is_some_and(|role| role == "master")
        && cluster
            .cli(port, &["CLUSTER", "INFO"])
            .lines()
            .any(|l| l.trim_end() == "cluster_state:ok")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_a_primary_resumes_decisions_after_failover() {
    primary_kill_resumes(Seed::Every).await;
}

/// The URL names only the primary that dies: tollgate must keep the topology it learned from
/// the other nodes and recover without its seed (the Kubernetes case of one pod address).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_only_seed_primary_resumes_decisions_after_failover() {
    primary_kill_resumes(Seed::Victim).await;
}

/// Which nodes the `redis-cluster://` URL names.
#[derive(Debug, Clone, Copy)]
enum Seed {
    Every,
    Victim,
}

async fn primary_kill_resumes(seed: Seed) {
    let mut cluster = blocking(|| RedisCluster::start(3, 1));
    // The primary that holds the traffic's tenant counter, and its replica.
    let (victim, heir) = blocking(|| {
        let victim = cluster.primary_for("{faults|tenant=alpha}");
        let heir = cluster
            .replicas()
            .into_iter()
            .find(|&r| cluster.master_of(r) == victim)
            .expect("the primary has a replica");
        (victim, heir)
    });
    let url = match seed {
        Seed::Every => cluster.seed_url(),
        Seed::Victim => format!("redis-cluster://127.0.0.1:{victim}"),
    };
    let store = redis_store(&url, "failover:", Duration::from_millis(200));
    let server = start_ready(store, FailureMode::Error).await;
    let mut client = server.client().await;
    let warm = try_call(&mut client, tenant_req("alpha")).await;
    assert!(warm.is_ok_and(|r| r.overall_code == OK), "warm-up call");
    let held = blocking(|| {
        cluster
            .cli(
                victim,
                &[
                    "KEYS",
                    &format!("failover:{KEY_FORMAT}{{faults|tenant=alpha}}*"),
                ],
            )
            .lines()
            .any(|l| !l.is_empty())
    });
    assert!(held, "primary {victim} holds the tenant's counter");

    fn alpha(_: usize, _: usize) -> RateLimitRequest {
        tenant_req("alpha")
    }
    let traffic = Traffic::start(&server, 4, Duration::from_millis(5), alpha).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    blocking(|| cluster.kill_node(victim));
    let failover = blocking(|| {
        let deadline = killed + Duration::from_secs(20);
        while !promoted(&cluster, heir) {
            assert!(
                Instant::now() < deadline,
                "replica {heir} not promoted 20 s after its primary {victim} was killed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        killed.elapsed()
    });
    let bound = failover + Duration::from_secs(2);
    // Traffic goes on past the bound, so resumption (and staying resumed) can be judged.
    let until = killed + bound + Duration::from_secs(1);
    tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    let samples = traffic.finish().await;

    // A call in flight when the primary died may fail too: judge calls by when they were answered.
    let before: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.answered_at() < killed)
        .collect();
    assert!(
        before.iter().all(|s| s.decided()),
        "calls answered before the kill must all succeed"
    );
    let last_before = before.iter().map(|s| s.answered_at()).max();
    let first_after = samples
        .iter()
        .filter(|s| s.sent >= killed && s.decided())
        .map(Sample::answered_at)
        .min();
    let during: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.answered_at() >= killed && first_after.is_none_or(|t| s.sent < t))
        .collect();
    let worst = during.iter().map(|s| s.latency).max().unwrap_or_default();
    let unanswered = during
        .iter()
        .filter(|s| {
            !matches!(&s.result, Err(status) if status.code() == tonic::Code::Unavailable)
                && !s.decided()
        })
        .count();
    let resumed = first_after.map(|t| t.duration_since(killed));
    println!(
        "failover ({seed:?} seed): replica {heir} promoted {} after primary {victim} was killed; first decision \
         {} after the kill (gap since the last one before: {}); {} calls failed in between \
         (UNAVAILABLE per policy), slowest {}",
        ms(failover),
        resumed.map_or("never".into(), ms),
        match (last_before, first_after) {
            (Some(a), Some(b)) => ms(b.duration_since(a)),
            _ => "n/a".into(),
        },
        during.iter().filter(|s| !s.decided()).count(),
        ms(worst)
    );
    let resumed = resumed.expect("decisions never resumed after the failover");
    assert!(
        resumed <= bound,
        "decisions resumed {} after the kill; failover took {}, bound {}",
        ms(resumed),
        ms(failover),
        ms(bound)
    );
    assert_eq!(
        unanswered, 0,
        "calls during failover must fail as UNAVAILABLE"
    );
    assert!(
        worst <= Duration::from_millis(500),
        "a call during failover took {} (redis timeout 200 ms)",
        ms(worst)
    );
    let settled = killed + resumed + Duration::from_millis(500);
    let late_failures: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.sent >= settled && !s.decided())
        .collect();
    assert!(
        late_failures.is_empty(),
        "{} calls failed more than 500 ms after decisions resumed; first: {}",
        late_failures.len(),
        late_failures[0].describe()
    );
    server.stop().await;
}

/// Checks an answer given while Redis is down against the failure policy.
fn per_policy(mode: FailureMode, result: &Result<RateLimitResponse, tonic::Status>) -> bool {
    match (mode, result) {
        (FailureMode::Error, Err(status)) => status.code() == tonic::Code::Unavailable,
        (FailureMode::Allow, Ok(resp)) => {
            resp.overall_code == OK
                && resp.statuses.iter().all(|s| s.code == OK)
                && resp
                    .response_headers_to_add
                    .iter()
                    .any(|h| h.key == FAILURE_HEADER)
        }
        (FailureMode::Deny, Ok(resp)) => {
            resp.overall_code == OVER_LIMIT && resp.statuses.iter().all(|s| s.code == OVER_LIMIT)
        }
        _ => false,
    }
}

const MODES: [FailureMode; 3] = [FailureMode::Error, FailureMode::Allow, FailureMode::Deny];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_node_outage_follows_the_failure_policy_and_recovers() {
    let mut redis = blocking(RedisServer::start);
    let redis_timeout = Duration::from_millis(20);
    let mut servers = Vec::new();
    for mode in MODES {
        let store = redis_store(&redis.url(), "outage:", redis_timeout);
        servers.push((mode, start_ready(store, mode).await));
    }
    for (mode, server) in &servers {
        let mut client = server.client().await;
        let resp = try_call(&mut client, tenant_req("warm")).await;
        assert!(
            resp.is_ok_and(|r| r.overall_code == OK),
            "{mode:?}: a decision before the outage"
        );
    }

    let stopped = Instant::now();
    blocking(|| redis.stop());
    // Probe readiness and call continuously while Redis is down, on every server at once.
    let mut tasks = Vec::new();
    for (mode, server) in &servers {
        let mode = *mode;
        let mut readiness = Readiness::of(server).await;
        tasks.push(tokio::spawn(async move {
            readiness
                .wait(
                    false,
                    stopped,
                    READINESS_BOUND,
                    &format!("{mode:?}: outage"),
                )
                .await
        }));
    }
    let mut callers = Vec::new();
    for (mode, server) in &servers {
        for task in 0..3 {
            let mode = *mode;
            let mut client = server.client().await;
            callers.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut wrong = Vec::new();
                let mut n = 0;
                while stopped.elapsed() < READINESS_BOUND + Duration::from_millis(500) {
                    let t = Instant::now();
                    let result = try_call(&mut client, tenant_req(&format!("t{task}-{n}"))).await;
                    latencies.push(t.elapsed());
                    if !per_policy(mode, &result) {
                        wrong.push(format!("{result:?}"));
                    }
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (mode, latencies, wrong)
            }));
        }
    }
    let mut detection = Vec::new();
    for t in tasks {
        detection.push(t.await.expect("readiness task"));
    }
    let mut by_mode: Vec<(FailureMode, Vec<Duration>, Vec<String>)> =
        MODES.iter().map(|&m| (m, Vec::new(), Vec::new())).collect();
    for c in callers {
        let (mode, latencies, wrong) = c.await.expect("caller task");
        let entry = by_mode
            .iter_mut()
            .find(|(m, _, _)| *m == mode)
            .expect("a known mode");
        entry.1.extend(latencies);
        entry.2.extend(wrong);
    }
    let mut failures = Vec::new();
    for (mode, mut latencies, wrong) in by_mode {
        latencies.sort();
        let max = latencies.last().copied().unwrap_or_default();
        let p50 = latencies
            .get(latencies.len() / 2)
            .copied()
            .unwrap_or_default();
        println!(
            "outage, {mode:?}: {} calls, p50 {}, max {}, {} not per policy",
            latencies.len(),
            ms(p50),
            ms(max),
            wrong.len()
        );
        if max >= Duration::from_millis(100) {
            failures.push(format!(
                "{mode:?}: a call took {} during the outage",
                ms(max)
            ));
        }
        if let Some(first) = wrong.first() {
            failures.push(format!(
                "{mode:?}: {} answers not per policy; first: {first}",
                wrong.len()
            ));
        }
    }
    for ((mode, _), d) in servers.iter().zip(&detection) {
        println!(
            "outage, {mode:?}: NOT_SERVING {} after Redis stopped",
            ms(*d)
        );
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));

    blocking(|| redis.restart());
    let restarted = Instant::now();
    for (mode, server) in &servers {
        let mut readiness = Readiness::of(server).await;
        let back = readiness
            .wait(
                true,
                restarted,
                READINESS_BOUND,
                &format!("{mode:?}: recovery"),
            )
            .await;
        let mut client = server.client().await;
        let result = try_call(&mut client, tenant_req("after")).await;
        println!(
            "recovery, {mode:?}: SERVING {} after Redis restarted",
            ms(back)
        );
        assert!(
            result.as_ref().is_ok_and(|r| r.overall_code == OK
                && !r
                    .response_headers_to_add
                    .iter()
                    .any(|h| h.key == FAILURE_HEADER)),
            "{mode:?}: a decision after recovery: {result:?}"
        );
    }
    for (_, server) in servers {
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn starting_while_redis_is_down_serves_once_it_is_up() {
    let mut redis = blocking(RedisServer::start);
    blocking(|| redis.stop());

    let store = redis_store(&redis.url(), "startup:", Duration::from_millis(200));
    let t = Instant::now();
    let server = start_unready(store, FailureMode::Error).await;
    let startup = t.elapsed();
    let mut readiness = Readiness::of(&server).await;
    // Not ready at once, and still not ready a second later.
    for _ in 0..2 {
        assert_eq!(
            readiness.sample().await,
            (false, false),
            "readiness while Redis is down"
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let mut client = server.client().await;
    let t = Instant::now();
    let result = try_call(&mut client, tenant_req("early")).await;
    let latency = t.elapsed();
    assert!(
        per_policy(FailureMode::Error, &result),
        "a call before Redis is up: {result:?}"
    );

    blocking(|| redis.restart());
    let restarted = Instant::now();
    let bound = Duration::from_secs(3);
    let ready = readiness
        .wait(true, restarted, bound, "startup with Redis down")
        .await;
    let result = try_call(&mut client, tenant_req("late")).await;
    println!(
        "startup with Redis down: server::start took {}, a call answered UNAVAILABLE in {}, \
         SERVING {} after Redis started",
        ms(startup),
        ms(latency),
        ms(ready)
    );
    assert!(
        result.as_ref().is_ok_and(|r| r.overall_code == OK),
        "a decision once Redis is up: {result:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_full_outage_turns_not_serving_and_recovers() {
    let mut cluster = blocking(|| RedisCluster::start(3, 1));
    let redis_timeout = Duration::from_millis(200);
    let store = redis_store(&cluster.seed_url(), "full:", redis_timeout);
    let server = start_ready(store, FailureMode::Error).await;
    let mut client = server.client().await;
    let mut readiness = Readiness::of(&server).await;
    let warm = try_call(&mut client, tenant_req("warm")).await;
    assert!(warm.is_ok_and(|r| r.overall_code == OK), "warm-up call");

    let stopped = Instant::now();
    blocking(|| cluster.stop_all());
    let down = readiness
        .wait(false, stopped, READINESS_BOUND, "cluster outage")
        .await;
    let t = Instant::now();
    let result = try_call(&mut client, tenant_req("during")).await;
    let latency = t.elapsed();
    assert!(
        per_policy(FailureMode::Error, &result),
        "a call during the outage: {result:?}"
    );
    assert!(
        latency <= redis_timeout + Duration::from_millis(100),
        "a call during the outage took {}",
        ms(latency)
    );

    let t = Instant::now();
    blocking(|| cluster.start_all());
    let reform = t.elapsed();
    let cluster_ok = Instant::now();
    let up = readiness
        .wait(true, cluster_ok, READINESS_BOUND, "cluster recovery")
        .await;
    let result = try_call(&mut client, tenant_req("after")).await;
    println!(
        "cluster outage: NOT_SERVING {} after all nodes stopped; a call answered UNAVAILABLE in \
         {}; cluster took {} to reform to cluster_state:ok; SERVING {} after that",
        ms(down),
        ms(latency),
        ms(reform),
        ms(up)
    );
    assert!(
        result.as_ref().is_ok_and(|r| r.overall_code == OK),
        "a decision after the cluster is back: {result:?}"
    );
    server.stop().await;
}
