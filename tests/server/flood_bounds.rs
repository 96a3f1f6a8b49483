//! Every other bound of issue 48, each gone past once on the real binary: calls per gRPC
//! connection (a stream past the cap is refused), idle connections and peers that never answer a
//! keepalive PING (closed), a gRPC message past 4 MiB and an admin body past 1 MiB (refused with
//! a clear error), an xDS response past its size or domain bound (the running config stays),
//! and the memory store and the who-is-limited sketches under a flood of 1,000,000 distinct
//! keys. Each test checks that others are still served and prints the server's RSS (the
//! figures are in RELIABILITY.md).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitRequest;

use crate::floods::{healthz, port_of, rss_kib};
use crate::metrics::{scrape_url, value};
use crate::support::binary::{Binary, Start, BIN};
use crate::support::server::{descriptor, http_client, ports, req, TempConfig};
use crate::support::xds::{domain, limit, ControlPlane, HOUR};

const YAML: &str = "domain: floods\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100}\n";

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

async fn client(bin: &Binary) -> RateLimitServiceClient<tonic::transport::Channel> {
    RateLimitServiceClient::connect(bin.grpc_url.clone())
        .await
        .expect("a gRPC client connects")
}

/// One plain call on a connection of its own, and the admin port's `/healthz`: the server
/// still serves others.
async fn others_served(bin: &Binary) {
    others_served_in(bin, "floods", ("k", "other")).await
}

async fn others_served_in(bin: &Binary, domain: &str, entry: (&str, &str)) {
    let answer = client(bin)
        .await
        .should_rate_limit(req(domain, &[&[entry]]))
        .await
        .expect("another client is answered");
    assert_eq!(answer.into_inner().overall_code, OK);
    assert!(healthz(bin).await);
}

/// HTTP/2 by hand, as an attacker writes it: frames, and headers as HPACK literals.
mod h2raw {
    use super::*;

    pub const DATA: u8 = 0;
    pub const HEADERS: u8 = 1;
    pub const RST_STREAM: u8 = 3;
    pub const SETTINGS: u8 = 4;
    pub const PING: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const REFUSED_STREAM: u32 = 7;

    pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A `ShouldRateLimit` call's headers, each a literal without indexing (names and values
    /// under 127 bytes).
    pub fn call_headers() -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in [
            (":method", "POST"),
            (":scheme", "http"),
            (
                ":path",
                "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            ),
            (":authority", "tollgate"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ] {
            block.push(0);
            block.push(name.len() as u8);
            block.extend_from_slice(name.as_bytes());
            block.push(value.len() as u8);
            block.extend_from_slice(value.as_bytes());
        }
        block
    }

    /// The next frame, or `None` once the connection is closed (or nothing came by `until`).
    pub fn read(s: &mut TcpStream, until: Instant) -> Option<(u8, u8, u32, Vec<u8>)> {
        let mut head = [0u8; 9];
        read_exact(s, &mut head, until)?;
        let len = (head[0] as usize) << 16 | (head[1] as usize) << 8 | head[2] as usize;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        read_exact(s, &mut payload, until)?;
        Some((head[3], head[4], stream, payload))
    }

    fn read_exact(s: &mut TcpStream, buf: &mut [u8], until: Instant) -> Option<()> {
        let mut got = 0;
        while got < buf.len() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            s.set_read_timeout(Some(left)).unwrap();
            match s.read(&mut buf[got..]) {
                Ok(0) | Err(_) => return None,
                Ok(n) => got += n,
            }
        }
        Some(())
    }

    /// A whole `ShouldRateLimit` call on `stream`: its headers, and its message with
    /// END_STREAM.
    pub fn call(stream: u32) -> Vec<u8> {
        use prost::Message;
        let message = req("floods", &[&[("k", "raw")]]).encode_to_vec();
        let mut body = vec![0];
        body.extend_from_slice(&(message.len() as u32).to_be_bytes());
        body.extend_from_slice(&message);
        let mut frames = frame(HEADERS, 4, stream, &call_headers());
        frames.extend(frame(DATA, 1, stream, &body));
        frames
    }

    /// Connects, sends the preface and empty SETTINGS, and acknowledges the server's.
    pub fn connect(port: u16) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
        s.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let (kind, flags, _, _) = read(&mut s, until).expect("the server's SETTINGS");
            if kind == SETTINGS && flags & 1 == 0 {
                s.write_all(&frame(SETTINGS, 1, 0, &[])).unwrap();
                return s;
            }
        }
    }
}

/// `--grpc-max-concurrent-streams 4`: a client that opens ten calls at once on one connection
/// (never finishing their bodies) has six refused with `REFUSED_STREAM`, four held; other
/// connections are served meanwhile. `--grpc-max-connection-idle 2s`: a connection on which no
/// call was ever opened gets GOAWAY after 2 s, not before, and is closed 5 s later when the
/// peer does not close it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_cap_are_refused_and_idle_connections_closed() {
    let config = TempConfig::new(YAML);
    let bin = Binary::serve(
        config.path(),
        &[
            "--grpc-max-concurrent-streams",
            "4",
            "--grpc-max-connection-idle",
            "2s",
        ],
        None,
    )
    .await;
    let port = port_of(&bin.grpc_url);
    let streams = tokio::task::spawn_blocking(move || {
        let mut s = h2raw::connect(port);
        for i in 0..10u32 {
            let headers = h2raw::call_headers();
            // END_HEADERS, not END_STREAM: each call waits for a body that never comes.
            s.write_all(&h2raw::frame(h2raw::HEADERS, 4, 1 + 2 * i, &headers))
                .unwrap();
        }
        // Past the 2 s idle bound: four calls are open on it, so it gets no GOAWAY.
        let until = Instant::now() + Duration::from_millis(3500);
        let mut refused = Vec::new();
        let mut goaway = false;
        while let Some((kind, _, stream, payload)) = h2raw::read(&mut s, until) {
            if kind == h2raw::RST_STREAM
                && u32::from_be_bytes(payload[..4].try_into().unwrap()) == h2raw::REFUSED_STREAM
            {
                refused.push(stream);
            }
            goaway |= kind == h2raw::GOAWAY;
        }
        (s, refused, goaway)
    });
    let idle = tokio::task::spawn_blocking(move || {
        // The server counts from the connection's start: so does this clock.
        let start = Instant::now();
        let mut s = h2raw::connect(port);
        let mut goaway = None;
        while let Some((kind, ..)) = h2raw::read(&mut s, start + Duration::from_secs(12)) {
            if kind == h2raw::GOAWAY && goaway.is_none() {
                goaway = Some(start.elapsed());
            }
        }
        (goaway, start.elapsed())
    });
    // A call a second for 5 s, then none: GOAWAY 2 s after the last answer, not before.
    let busy = tokio::task::spawn_blocking(move || {
        let mut s = h2raw::connect(port);
        let start = Instant::now();
        let mut last_answer = None;
        let mut goaway = None;
        for i in 0..5u32 {
            s.write_all(&h2raw::call(1 + 2 * i)).unwrap();
            let until = start + Duration::from_secs(1 + i as u64);
            while let Some((kind, flags, ..)) = h2raw::read(&mut s, until) {
                if kind == h2raw::HEADERS && flags & 1 == 1 {
                    last_answer = Some(start.elapsed());
                }
                if kind == h2raw::GOAWAY && goaway.is_none() {
                    goaway = Some(start.elapsed());
                }
            }
        }
        while let Some((kind, ..)) = h2raw::read(&mut s, start + Duration::from_secs(9)) {
            if kind == h2raw::GOAWAY && goaway.is_none() {
                goaway = Some(start.elapsed());
            }
        }
        (last_answer, goaway)
    });
    others_served(&bin).await;
    let (held, refused, held_goaway) = streams.await.unwrap();
    assert_eq!(refused, [9, 11, 13, 15, 17, 19], "streams refused past 4");
    assert!(!held_goaway, "a connection with open calls got GOAWAY");
    let (last_answer, busy_goaway) = busy.await.unwrap();
    let last_answer = last_answer.expect("the calls were answered");
    let busy_goaway = busy_goaway.expect("GOAWAY once the calls stopped");
    assert!(
        busy_goaway >= last_answer + Duration::from_millis(1950)
            && busy_goaway < last_answer + Duration::from_secs(4),
        "GOAWAY at {busy_goaway:?}, the last answer at {last_answer:?}"
    );
    let (goaway, closed) = idle.await.unwrap();
    let goaway = goaway.expect("an idle connection gets GOAWAY");
    assert!(
        goaway >= Duration::from_millis(1990) && goaway < Duration::from_secs(4),
        "GOAWAY after {goaway:?}, the bound is 2 s"
    );
    // This client never answers the GOAWAY's PING: the server closes 5 s after the GOAWAY.
    assert!(
        closed > goaway && closed < goaway + Duration::from_secs(7),
        "closed after {closed:?}"
    );
    others_served(&bin).await;
    println!(
        "streams: 6 of 10 refused past 4; idle connection: GOAWAY after {goaway:?}, closed after \
         {closed:?}; RSS {} KiB",
        rss_kib(bin.child.id())
    );
    drop(held);
}

/// `--grpc-keepalive 1s`: a peer that reads but never answers the server's PING is dropped
/// 20 s after the PING, and others are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_a_ping_is_dropped() {
    let config = TempConfig::new(YAML);
    let bin = Binary::serve(config.path(), &["--grpc-keepalive", "1s"], None).await;
    let port = port_of(&bin.grpc_url);
    let silent = tokio::task::spawn_blocking(move || {
        let mut s = h2raw::connect(port);
        let start = Instant::now();
        let mut first_ping = None;
        while let Some((kind, flags, ..)) = h2raw::read(&mut s, start + Duration::from_secs(30)) {
            if kind == h2raw::PING && flags & 1 == 0 && first_ping.is_none() {
                first_ping = Some(start.elapsed());
            }
        }
        (first_ping, start.elapsed())
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    others_served(&bin).await;
    let (ping, closed) = silent.await.unwrap();
    let ping = ping.expect("the server pings an idle connection");
    assert!(ping < Duration::from_secs(3), "first PING after {ping:?}");
    let silence = closed - ping;
    assert!(
        silence >= Duration::from_secs(19) && silence < Duration::from_secs(25),
        "dropped {silence:?} after an unanswered PING (the bound is 20 s); closed after {closed:?}"
    );
    others_served(&bin).await;
    println!("keepalive: PING after {ping:?}, dropped {silence:?} later");
}

/// A message past 4 MiB is refused RESOURCE_EXHAUSTED with the bound named; an admin body past
/// 1 MiB is answered 413; the server serves others after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_or_body_past_its_bound_is_refused() {
    let config = TempConfig::new(YAML);
    let bin = Binary::serve(config.path(), &["--admin-json"], None).await;
    let pid = bin.child.id();
    let before = rss_kib(pid);
    let big = "x".repeat(5 << 20);
    let mut c = client(&bin).await.max_encoding_message_size(16 << 20);
    let status = c
        .should_rate_limit(req("floods", &[&[("k", big.as_str())]]))
        .await
        .expect_err("a 5 MiB message is refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("larger than 4194304 bytes"),
        "{}",
        status.message()
    );
    let resp = http_client()
        .post(format!("{}/json", bin.http_url))
        .header("content-type", "application/json")
        .body(format!(
            "{{\"domain\":\"floods\",\"pad\":\"{}\"}}",
            &big[..2 << 20]
        ))
        .send()
        .await
        .expect("the admin port answers a 2 MiB body");
    assert_eq!(resp.status(), 413, "{:?}", resp.text().await);
    others_served(&bin).await;
    assert!(healthz(&bin).await);
    let json = http_client()
        .post(format!("{}/json", bin.http_url))
        .header("content-type", "application/json")
        .body(r#"{"domain":"floods","descriptors":[{"entries":[{"key":"k","value":"j"}]}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), 200, "a small body is still read");
    println!(
        "message 5 MiB refused, admin body 1.5 MiB refused; RSS {before} KiB before, {} KiB after",
        rss_kib(pid)
    );
}

/// An xDS response past `--config-xds-max-message-size` breaks that stream (tollgate
/// reconnects); one with more than 10,000 domains is NACKed naming the bound; through both the
/// config that was running still decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_responses_past_their_bounds_leave_the_running_config() {
    let plane = ControlPlane::start(None);
    plane.set(
        "v1",
        vec![domain("api", vec![limit("tenant", "", HOUR, 2)])],
    );
    let [grpc_port, http_port] = ports::<2>();
    let scratch = TempConfig::new("");
    let log_path = scratch.dir.join("tollgate.log");
    let args: Vec<String> = [
        "serve",
        "--config-xds",
        &format!("http://127.0.0.1:{}", plane.addr.port()),
        "--config-xds-max-message-size",
        "1MiB",
        "--config-xds-backoff-initial",
        "1s",
        "--config-xds-backoff-max",
        "1s",
        "--grpc-addr",
        &format!("127.0.0.1:{grpc_port}"),
        "--http-addr",
        &format!("127.0.0.1:{http_port}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let bin = Binary::start(Start {
        program: Path::new(BIN),
        args,
        env: Vec::new(),
        clear_env: true,
        grpc_port,
        http_port,
        log_path: Some(log_path.clone()),
    })
    .await;
    plane.wait_ack("v1", 0).await;
    let pid = bin.child.id();
    let before = rss_kib(pid);
    let mut c = client(&bin).await;
    let tenant = |t: &str| req("api", &[&[("tenant", t)]]);
    let code =
        |r: tonic::Response<tollgate::pb::rls::RateLimitResponse>| r.into_inner().overall_code;

    // About 1.2 MiB: past the 1 MiB bound.
    let wide: Vec<_> = (0..30_000)
        .map(|i| limit("tenant", &format!("tenant-number-{i:08}"), HOUR, 1 + i % 9))
        .collect();
    let seen = plane.received().len();
    plane.set("v2", vec![domain("api", wide)]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .contains(
            "the limit is: 1048576 bytes (a response larger than --config-xds-max-message-size)",
        )
    {
        assert!(
            Instant::now() < deadline,
            "no error for the oversized response; log: {}",
            bin.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !plane.received()[seen..].iter().any(|r| r.acks("v2")),
        "the oversized v2 was acknowledged"
    );
    assert_eq!(code(c.should_rate_limit(tenant("a")).await.unwrap()), OK);
    assert_eq!(code(c.should_rate_limit(tenant("a")).await.unwrap()), OK);
    assert_eq!(
        code(c.should_rate_limit(tenant("a")).await.unwrap()),
        OVER_LIMIT,
        "v1's limit of 2 still decides"
    );

    // 10,001 domains without descriptors (about 750 KiB): inside the size bound, past the
    // domain bound.
    let many: Vec<_> = (0..10_001)
        .map(|i| tollgate::pb::rls_conf::RateLimitConfig {
            domain: format!("{i}"),
            ..Default::default()
        })
        .collect();
    let seen = plane.received().len();
    plane.set("v3", many);
    let nack = plane.wait_nack(seen).await;
    let why = nack.nack().unwrap().to_string();
    assert!(
        why.contains("10001 resources, more than the 10000 domains"),
        "{why}"
    );
    assert_eq!(
        code(c.should_rate_limit(tenant("a")).await.unwrap()),
        OVER_LIMIT,
        "v1 still decides after the NACK"
    );
    assert_eq!(code(c.should_rate_limit(tenant("b")).await.unwrap()), OK);
    println!(
        "xDS: 1.2 MiB response cut at 1 MiB, 10,001 domains NACKed; RSS {before} KiB before, \
         {} KiB after",
        rss_kib(pid)
    );
}

/// The memory store bounded at 32 MiB under 1,000,000 distinct keys (10,000 requests of 100
/// descriptors each) while one daily key is charged 1,000 times: that key decides exactly
/// (its 1,001st charge is refused), evictions are counted (the last round's keys charged again
/// are admitted again as far as they were evicted: printed), and RSS stays under the bound plus
/// a stated margin. Then 100,000 distinct OVER_LIMIT descriptors:
/// `/top` names at most 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_distinct_keys_stay_inside_the_store_bound() {
    const BOUND_MIB: u64 = 32;
    /// The binary's own at rest (about 24 MiB: runtime, config, sketches, metrics), and what
    /// the allocator keeps of a million keys written and freed (30 to 45 MiB measured).
    const MARGIN_MIB: u64 = 80;
    let config = TempConfig::new(
        "domain: flood\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  \
         - key: hot\n    rate_limit: {unit: day, requests_per_unit: 1000}\n  \
         - key: z\n    rate_limit: {unit: minute, requests_per_unit: 0}\n",
    );
    let bin = Binary::serve(
        config.path(),
        &[
            "--max-store-bytes",
            &format!("{BOUND_MIB}MiB"),
            "--max-descriptors",
            "100",
        ],
        None,
    )
    .await;
    let pid = bin.child.id();
    let before = rss_kib(pid);
    let started = Instant::now();
    let mut peak = 0;
    let batch = |key: &str, round: usize| RateLimitRequest {
        domain: "flood".into(),
        descriptors: (0..100)
            .map(|i| descriptor(&[(key, &format!("{round:05}-{i:02}"))]))
            .collect(),
        hits_addend: 0,
    };
    let mut tasks = Vec::new();
    for part in 0..2usize {
        let mut c = client(&bin).await;
        tasks.push(tokio::spawn(async move {
            let mut hot_admitted = 0;
            for round in (part..10_000).step_by(2) {
                let answer = c.should_rate_limit(batch("k", round)).await.unwrap();
                assert_eq!(answer.into_inner().overall_code, OK, "round {round}");
                if round % 20 != part {
                    continue;
                }
                let hot = c
                    .should_rate_limit(req("flood", &[&[("hot", "one")]]))
                    .await
                    .unwrap();
                hot_admitted += (hot.into_inner().overall_code == OK) as u32;
            }
            hot_admitted
        }));
    }
    let sampled = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = tokio::spawn({
        let sampled = sampled.clone();
        async move {
            loop {
                sampled.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let mut hot_admitted = 0;
    for t in tasks {
        hot_admitted += t.await.unwrap();
    }
    let flood_took = started.elapsed();
    sampler.abort();
    peak = peak
        .max(rss_kib(pid))
        .max(sampled.load(std::sync::atomic::Ordering::Relaxed));
    let mut c = client(&bin).await;
    assert_eq!(hot_admitted, 1000, "the hot key admitted all of its 1,000");
    let hot = c
        .should_rate_limit(req("flood", &[&[("hot", "one")]]))
        .await
        .unwrap();
    assert_eq!(
        hot.into_inner().overall_code,
        OVER_LIMIT,
        "the hot key's 1,001st charge is refused: it was never evicted"
    );
    let scrape = scrape_url(&format!("{}/metrics", bin.http_url)).await;
    let evictions = value(&scrape, "tollgate_memory_evictions_total", &[]);
    assert!(evictions > 100_000.0, "{evictions} evictions counted");
    // Charge the last round's keys again, one at a time: each is refused unless it was evicted.
    let mut readmitted = 0.0;
    for i in 0..200 {
        let again = c
            .should_rate_limit(req(
                "flood",
                &[&[("k", &format!("{:05}-{:02}", 9_998 + i / 100, i % 100))]],
            ))
            .await
            .unwrap();
        readmitted += (again.into_inner().overall_code == OK) as u32 as f64;
    }
    // The sketches: 100,000 distinct descriptors answered OVER_LIMIT.
    for round in 0..1000 {
        let answer = c.should_rate_limit(batch("z", round)).await.unwrap();
        assert_eq!(answer.into_inner().overall_code, OVER_LIMIT);
    }
    let top: serde_json::Value = http_client()
        .get(format!("{}/top?domain=flood&n=64", bin.http_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = top["minute"].as_array().map_or(0, |a| a.len());
    assert!(
        (1..=64).contains(&listed),
        "/top lists {listed} descriptors: {top}"
    );
    peak = peak.max(rss_kib(pid));
    let after = rss_kib(pid);
    others_served_in(&bin, "flood", ("hot", "another")).await;
    println!(
        "1,000,000 keys in {flood_took:?}: {evictions} evictions, {readmitted} of 200 re-admitted; \
         RSS {before} KiB before, peak {peak} KiB, {after} KiB after (bound {BOUND_MIB} MiB + \
         margin {MARGIN_MIB} MiB); /top lists {listed}"
    );
    assert!(
        peak < (BOUND_MIB + MARGIN_MIB) * 1024,
        "peak RSS {peak} KiB past {BOUND_MIB} MiB + {MARGIN_MIB} MiB"
    );
}
