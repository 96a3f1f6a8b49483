//! The statsd sink as envoyproxy/ratelimit's users turn it on: the binary run as `ratelimit`
//! with `USE_STATSD=true`, `STATSD_HOST`, `STATSD_PORT`, `STATS_FLUSH_INTERVAL` and
//! `EXTRA_TAGS` sends, to a UDP socket of the test, the counters of a scripted run (their
//! increases summing to envoyproxy/ratelimit's counts, tags in the names as gostats writes
//! them) and one `response_time` sample per call; with statsd at a closed port or an
//! unresolvable host decisions stay prompt; `DISABLE_STATS` sends nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;

use crate::support::binary::Binary;
use crate::support::redis::RedisServer;
use crate::support::server::*;

const CONFIG: &str = "\
domain: sd
descriptors:
  - key: route
    value: a
    rate_limit: {unit: hour, requests_per_unit: 5}
";

struct Running {
    binary: Binary,
    _redis: RedisServer,
    _scratch: TempConfig,
}

async fn start(statsd: &[(&str, &str)]) -> Running {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let scratch = TempConfig::new("");
    let config_dir = scratch.dir.join("data/ratelimit/config");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    std::fs::write(config_dir.join("config.yaml"), CONFIG).expect("config");
    let (http_port, grpc_port) = (free_port(), free_port());
    let mut env: Vec<(String, String)> = [
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        (
            "RUNTIME_ROOT",
            scratch.dir.join("data").display().to_string(),
        ),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("PORT", http_port.to_string()),
        ("GRPC_PORT", grpc_port.to_string()),
        ("DEBUG_PORT", free_port().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(statsd.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut binary = Binary::as_ratelimit(&scratch.dir, env, grpc_port, http_port).await;
    binary.wait_ready().await;
    Running {
        binary,
        _redis: redis,
        _scratch: scratch,
    }
}

async fn client(r: &Running) -> RateLimitServiceClient<tonic::transport::Channel> {
    let addr = format!("127.0.0.1:{}", r.binary.grpc_port())
        .parse()
        .expect("addr");
    RateLimitServiceClient::new(channel(addr).await)
}

/// 5 an hour (near limit above 4): 1, 2, 3 within; 3 more would make 6 (denied, charges
/// nothing: 1 over, 1 near); 4 within; 5 within and near; 6 over. 7 calls, 9 hits.
async fn script(r: &Running) {
    let mut client = client(r).await;
    for (hits, want) in [
        (1, OK),
        (1, OK),
        (1, OK),
        (3, OVER_LIMIT),
        (1, OK),
        (1, OK),
        (1, OVER_LIMIT),
    ] {
        let mut q = req("sd", &[&[("route", "a")]]);
        q.hits_addend = hits;
        let got = call(&mut client, q).await;
        assert_eq!(got.overall_code, want, "hits {hits}: {got:?}");
    }
}

/// What the datagrams said so far: counters summed by name, timer samples by name, and
/// every line (for messages).
#[derive(Default)]
struct Received {
    counters: HashMap<String, u64>,
    timers: HashMap<String, Vec<u64>>,
    lines: Vec<String>,
}

impl Received {
    fn add(&mut self, datagram: &str) {
        for line in datagram.split('\n').filter(|l| !l.is_empty()) {
            self.lines.push(line.to_string());
            let (name, rest) = line.split_once(':').expect("name:value");
            let (value, kind) = rest.split_once('|').expect("value|kind");
            let value: u64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
            match kind {
                "c" => *self.counters.entry(name.into()).or_default() += value,
                "ms" => self.timers.entry(name.into()).or_default().push(value),
                _ => panic!("unexpected statsd line {line}"),
            }
        }
    }
}

/// Reads datagrams until `done` holds (at most 15 seconds).
async fn receive(socket: &tokio::net::UdpSocket, done: impl Fn(&Received) -> bool) -> Received {
    let mut got = Received::default();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = vec![0u8; 65536];
    while !done(&got) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.recv(&mut buf)).await {
            Ok(Ok(n)) => got.add(std::str::from_utf8(&buf[..n]).expect("utf-8")),
            Ok(Err(e)) => panic!("recv: {e}"),
            Err(_) => panic!("statsd lines still missing; got:\n{}", got.lines.join("\n")),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn statsd_lines_of_a_scripted_run() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("udp");
    let port = socket.local_addr().unwrap().port().to_string();
    let r = start(&[
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", &port),
        ("STATSD_PROTOCOL", "udp"),
        ("STATS_FLUSH_INTERVAL", "100ms"),
        ("EXTRA_TAGS", "zone:eu.1,app:tg"),
    ])
    .await;
    script(&r).await;
    const TAGS: &str = ".__app=tg.__zone=eu_1";
    let rule = |s: &str| format!("ratelimit.service.rate_limit.sd.route_a.{s}{TAGS}");
    let want: Vec<(String, u64)> = vec![
        (rule("total_hits"), 9),
        (rule("within_limit"), 5),
        (rule("near_limit"), 2),
        (rule("over_limit"), 2),
        (format!("ratelimit.service.config_load_success{TAGS}"), 1),
        (
            format!("ratelimit_server.ShouldRateLimit.total_requests{TAGS}"),
            7,
        ),
    ];
    let timer = format!("ratelimit_server.ShouldRateLimit.response_time{TAGS}");
    let got = receive(&socket, |got| {
        want.iter()
            .all(|(name, n)| got.counters.get(name) >= Some(n))
            && got.timers.get(&timer).map_or(0, Vec::len) >= 7
    })
    .await;
    // Exact, and nothing more comes: another few flushes add nothing.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut got = got;
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = socket.try_recv(&mut buf) {
        got.add(std::str::from_utf8(&buf[..n]).unwrap());
    }
    let all = got.lines.join("\n");
    for (name, n) in &want {
        assert_eq!(got.counters.get(name), Some(n), "{name} in:\n{all}");
    }
    assert_eq!(got.timers[&timer].len(), 7, "{all}");
    for name in got.counters.keys() {
        assert!(name.ends_with(TAGS), "{name}: tags in every name:\n{all}");
    }
    for unsent in ["over_limit_with_local_cache", "shadow_mode"] {
        assert!(
            !got.counters.contains_key(&rule(unsent)),
            "{unsent} unchanged, unsent:\n{all}"
        );
    }
    for line in &got.lines {
        assert!(
            !line.contains('#'),
            "plain statsd has no DogStatsD tags: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dogstatsd_tags() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("udp");
    let port = socket.local_addr().unwrap().port().to_string();
    let r = start(&[
        ("USE_STATSD", "false"),
        ("USE_DOG_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", &port),
        ("STATS_FLUSH_INTERVAL", "100ms"),
        ("EXTRA_TAGS", "zone:eu.1,app:tg"),
    ])
    .await;
    script(&r).await;
    let total = "ratelimit.service.rate_limit.sd.route_a.total_hits";
    let mut lines = Vec::new();
    let mut hits = 0;
    let mut buf = vec![0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(15);
    while hits < 9 {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = match tokio::time::timeout(left, socket.recv(&mut buf)).await {
            Ok(r) => r.expect("recv"),
            Err(_) => panic!("total_hits incomplete:\n{}", lines.join("\n")),
        };
        for line in std::str::from_utf8(&buf[..n]).unwrap().split('\n') {
            lines.push(line.to_string());
            if let Some(rest) = line.strip_prefix(&format!("{total}:")) {
                let (n, tail) = rest.split_once('|').expect("value|type");
                assert_eq!(tail, "c|#app:tg,zone:eu_1", "{line}");
                hits += n.parse::<u64>().unwrap();
            }
        }
    }
    assert_eq!(hits, 9, "{}", lines.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_statsd_never_slows_a_decision() {
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let port = closed.local_addr().unwrap().port().to_string();
    drop(closed);
    for host in ["127.0.0.1", "statsd.invalid"] {
        let r = start(&[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", host),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "10ms"),
        ])
        .await;
        let mut client = client(&r).await;
        let began = Instant::now();
        for _ in 0..200 {
            let t = Instant::now();
            let got = call(&mut client, req("sd", &[&[("route", "a")]])).await;
            assert!(got.overall_code == OK || got.overall_code == OVER_LIMIT);
            assert!(
                t.elapsed() < Duration::from_millis(500),
                "{host}: {:?}",
                t.elapsed()
            );
            if began.elapsed() < Duration::from_millis(300) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        // UDP to a closed port fails silently (the socket is not connected); a name that
        // does not resolve is logged.
        let log = r.binary.log();
        assert!(
            host == "127.0.0.1" || log.contains("statsd: statistics not sent"),
            "{host}: logged:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn disable_stats_sends_nothing() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("udp");
    let port = socket.local_addr().unwrap().port().to_string();
    let r = start(&[
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", &port),
        ("STATS_FLUSH_INTERVAL", "10ms"),
        ("DISABLE_STATS", "true"),
    ])
    .await;
    script(&r).await;
    let mut buf = [0u8; 1500];
    let got = tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf)).await;
    assert!(got.is_err(), "a datagram with DISABLE_STATS: {got:?}");
}
