//! Redis Sentinel: a primary, its replica and a real `redis-server --sentinel` trio. tollgate
//! connects through `redis-sentinel://`, the primary is killed, the sentinels promote the
//! replica, and tollgate follows it without a restart.

use std::process::{Child, Command, Stdio};

use super::*;
use crate::support::process::spawn;
use crate::support::server::free_port;

/// One `redis-server --sentinel` process with its own config file.
struct Sentinel {
    port: u16,
    child: Child,
    /// Holds `sentinel.conf` (sentinels rewrite it); removed on drop.
    _dir: common::TempConfig,
}

impl Sentinel {
    fn start(primary: u16) -> Sentinel {
        let port = free_port();
        let dir = common::TempConfig::new("");
        let conf = dir.dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor primary 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds primary 1000\n\
                 sentinel failover-timeout primary 5000\n\
                 sentinel parallel-syncs primary 1\n",
                dir.dir.display()
            ),
        )
        .expect("write sentinel.conf");
        let mut command = Command::new("redis-server");
        command
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = spawn(command).expect("start redis-server --sentinel");
        let sentinel = Sentinel {
            port,
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while sentinel.cli(&["PING"]) != "PONG" {
            assert!(
                Instant::now() < deadline,
                "sentinel {port} never answered PING"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sentinel
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The primary's port as this sentinel knows it.
    fn primary_port(&self) -> Option<u16> {
        let reply = self.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "primary"]);
        reply.lines().nth(1)?.trim().parse().ok()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failover_is_followed_without_a_restart() {
    let (mut primary, replica, sentinels) = blocking(|| {
        let primary = RedisServer::start();
        let replica = RedisServer::start_with(
            &["--replicaof", "127.0.0.1", &primary.port().to_string()],
            false,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !primary
            .cli(&["INFO", "replication"])
            .contains("connected_slaves:1")
        {
            assert!(Instant::now() < deadline, "the replica never connected");
            std::thread::sleep(Duration::from_millis(50));
        }
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(primary.port())).collect();
        // Every sentinel has found the others and the replica.
        let deadline = Instant::now() + Duration::from_secs(15);
        while !sentinels.iter().all(|s| {
            let info = s.cli(&["SENTINEL", "PRIMARY", "primary"]);
            let info = if info.is_empty() || info.starts_with("ERR") {
                s.cli(&["SENTINEL", "MASTER", "primary"])
            } else {
                info
            };
            let field = |name: &str| {
                let lines: Vec<&str> = info.lines().collect();
                lines
                    .iter()
                    .position(|l| *l == name)
                    .and_then(|i| lines.get(i + 1))
                    .and_then(|v| v.parse::<u32>().ok())
            };
            field("num-other-sentinels") == Some(2) && field("num-slaves") == Some(1)
        }) {
            assert!(
                Instant::now() < deadline,
                "the sentinels never found each other"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        (primary, replica, sentinels)
    });
    let url = format!(
        "redis-sentinel://{}/primary",
        sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    );
    let store = redis_store(&url, "sentinel:", Duration::from_millis(200));
    let server = start_ready(store, FailureMode::Error).await;
    let mut client = server.client().await;
    let first = try_call(&mut client, tenant_req("alpha")).await;
    assert!(first.is_ok_and(|r| r.overall_code == OK), "first call");
    assert!(
        blocking(|| !primary.cli(&["KEYS", "sentinel:*"]).trim().is_empty()),
        "the counter is in the primary the sentinels name"
    );

    // --redis-wait-replicas 1 through Sentinel: decided while the primary has its replica.
    let durable = {
        let mut setup = RedisSetup::new(url.clone(), &ManualClock::new(0));
        setup.key_prefix = "sentinel-durable:".into();
        setup.timeout = Duration::from_millis(300);
        setup.clock = ClockSource::Redis;
        setup.wall = Arc::new(SystemClock);
        setup.local_cache_size = 0;
        setup.wait_replicas = 1;
        start_ready(Arc::new(setup.connect()), FailureMode::Error).await
    };
    let mut durable_client = durable.client().await;
    // Once the replica is in sync (a replica still loading its first copy acknowledges nothing;
    // Redis's diskless sync waits 5 s for more replicas by default).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = try_call(&mut durable_client, tenant_req("durable")).await;
        if r.as_ref().is_ok_and(|r| r.overall_code == OK) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a durable call through Sentinel: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    fn alpha(_: usize, _: usize) -> RateLimitRequest {
        tenant_req("alpha")
    }
    let traffic = Traffic::start(&server, 2, Duration::from_millis(10), alpha).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    blocking(|| primary.stop());
    let promoted = blocking(|| {
        let deadline = killed + Duration::from_secs(30);
        while sentinels[0].primary_port() != Some(replica.port()) {
            assert!(
                Instant::now() < deadline,
                "the sentinels did not promote the replica within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        killed.elapsed()
    });
    tokio::time::sleep(Duration::from_secs(4)).await;
    let samples = traffic.finish().await;
    let resumed = samples
        .iter()
        .filter(|s| s.sent >= killed && s.decided())
        .map(|s| s.answered_at().duration_since(killed))
        .min();
    println!(
        "sentinel failover: replica promoted {} after the primary was killed; first decision {} \
         after the kill; {} calls failed in between",
        ms(promoted),
        resumed.map_or("never".into(), ms),
        samples
            .iter()
            .filter(|s| s.sent >= killed && !s.decided())
            .count()
    );
    let resumed = resumed.expect("decisions never resumed after the sentinel failover");
    assert!(
        resumed <= promoted + Duration::from_secs(3),
        "decisions resumed {} after the kill, promotion took {}",
        ms(resumed),
        ms(promoted)
    );
    // The last second of traffic was all decided, on the promoted primary.
    let tail_start = Instant::now() - Duration::from_secs(1);
    assert!(samples
        .iter()
        .filter(|s| s.sent >= tail_start)
        .all(Sample::decided));
    assert!(
        blocking(|| !replica.cli(&["KEYS", "sentinel:*"]).trim().is_empty()),
        "the promoted replica holds the counter"
    );
    // The promoted replica has no replica of its own: a durable call cannot be acknowledged.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = try_call(&mut durable_client, tenant_req("durable")).await;
        match r {
            Err(status) if status.message().contains("not replicated") => break,
            other => assert!(
                Instant::now() < deadline,
                "after the failover, with no replica left: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    durable.stop().await;
    server.stop().await;
}
