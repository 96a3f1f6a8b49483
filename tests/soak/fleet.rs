//! Everything the soak runs: both regions' Redis, four tollgate instances, the xDS control
//! plane, the delaying proxy between the regions and Envoy; what a period does; the samples
//! taken after each period (RSS, Redis memory) and what they must show.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::pb::rls_conf::RateLimitConfig;
use tonic::transport::Channel;

use crate::faults::{self, Fault};
use crate::load::{self, GlobalLoad, Tally};
use crate::support::binary::{Binary, Start, BIN};
use crate::support::delay::DelayProxy;
use crate::support::envoy::{admin, cluster, socket_address, Backend, Envoy};
use crate::support::kit::blocking;
use crate::support::netcut::{LoopbackCluster, Netcut};
use crate::support::redis::RedisServer;
use crate::support::server::ports;
use crate::support::xds::{self, ControlPlane};
use crate::{now_ms, sleep_until_ms, Shape};

/// The limits every instance reads from its files (A, B, C): one file per domain. Windows
/// are as long as a period and start with it, so each period's fresh keys get one window.
pub fn soak_yaml(period_s: u64, marker: u64) -> String {
    format!(
        "\
# reload marker {marker}
domain: soak
prices:
  currency: USD
  per_million_tokens:
    m1: {{input: 1.00, output: 2.00}}
descriptors:
  - key: fixed
    rate_limit: {{unit: second, window: {period_s}s, requests_per_unit: 20}}
  - key: sliding
    rate_limit: {{unit: second, window: {period_s}s, requests_per_unit: 20, algorithm: sliding_window}}
  - key: bucket
    rate_limit: {{unit: minute, requests_per_unit: 20, algorithm: token_bucket}}
  - key: calendar
    rate_limit: {{calendar: day, timezone: UTC, requests_per_unit: 20}}
  - key: tenant
    rate_limits:
      - {{name: per-tenant, unit: second, window: {period_s}s, requests_per_unit: 10}}
      - {{name: tenants-pool, unit: second, window: {period_s}s, requests_per_unit: 40, shared: true}}
  - key: slots
    rate_limit: {{algorithm: concurrency, requests_per_unit: 6, lease_ttl: {lease}s}}
  - key: rsv
    rate_limit: {{unit: second, window: {period_s}s, requests_per_unit: 1000}}
  - key: classes
    hierarchical: true
    rate_limit:
      {{name: class-pool, unit: second, window: {period_s}s, requests_per_unit: 50, shared: true,
       shares: {{by: priority, classes: {{interactive: 0.5, batch: 0.2}}, default: batch, borrow_until: 0.8}}}}
    descriptors: [{{key: priority}}]
  - key: fair
    hierarchical: true
    rate_limit: {{name: fair-pool, unit: second, window: {period_s}s, requests_per_unit: 60, shared: true, fair_share: {{by: tenant}}}}
    descriptors: [{{key: tenant}}]
  - key: spend
    hierarchical: true
    rate_limit: {{name: spend, unit: second, window: {period_s}s, spend: 0.01}}
  - key: wait
    rate_limit: {{unit: second, requests_per_unit: 10, algorithm: token_bucket, max_wait: 400ms}}
  - key: reload_marker
    value: m{marker}
    rate_limit: {{unit: hour, requests_per_unit: 1}}
",
        lease = period_s * 2
    )
}

/// The domain X reads over xDS, which A and B read from a file: the three count together.
const XDS_YAML: &str = "
domain: soakxds
descriptors:
  - key: x
    rate_limit: {unit: minute, requests_per_unit: 20}
";

/// The xDS resource for `soakxds` at update `n` (each adds a descriptor of its own).
pub fn xds_config(n: u64) -> Vec<RateLimitConfig> {
    vec![xds::domain(
        "soakxds",
        vec![
            xds::limit("x", "", xds::MINUTE, 20),
            xds::limit("update", &format!("u{n}"), xds::HOUR, 1),
        ],
    )]
}

const GLOBAL_YAML: &str = "
domain: soakglobal
descriptors:
  - key: provider
    value: openai
    rate_limit:
      unit: second
      window: 2s
      requests_per_unit: 300
      shared: true
      global: {home: eu, regions: [eu, us], on_partition: safe_share, safe_share: 0.05}
";

/// The gRPC side of the instances the callers use, and Envoy's port.
pub struct Callers {
    /// A and B (region us, on the cluster, from files).
    pub us: [Channel; 2],
    /// X (the cluster, from xDS).
    pub x: Channel,
    /// C (region eu, home).
    pub eu: Channel,
    /// Envoy's listener, in front of A.
    pub envoy_port: u16,
}

pub struct Fleet {
    pub shape: Shape,
    pub cluster: LoopbackCluster,
    pub netcut: Netcut,
    _eu: (RedisServer, RedisServer),
    _proxy: DelayProxy,
    pub plane: ControlPlane,
    pub config_dir: PathBuf,
    /// A, B, X, C.
    pub instances: Vec<(&'static str, Binary)>,
    _envoy: Envoy,
    pub callers: Arc<Callers>,
    /// Config reloads and xDS updates so far.
    pub reloads: u64,
    pub xds_updates: u64,
    /// Which primary the next fault strikes (they take turns).
    pub next_victim: usize,
    /// Periods (start, end, Unix ms) in which a primary lost its data: the global limit may
    /// go over there.
    pub losses: Vec<(u64, u64)>,
}

pub const TABLE_HEAD: &str = "| period | fault | calls | OK | OVER_LIMIT | failure policy | errors | over-admitted | reservations made / settled / lost | RSS MiB A / B / X / C | Redis MiB |\n|---|---|---|---|---|---|---|---|---|---|---|";

async fn channel(url: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect_timeout(Duration::from_secs(2))
        .connect_lazy()
}

fn instance_args(config: &Path, extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = vec!["serve".into()];
    if !extra.iter().any(|a| a == "--config-xds") {
        args.extend(["--config".into(), config.to_string_lossy().into_owned()]);
    }
    args.extend(
        [
            "--failure-mode",
            "deny",
            "--store-failure-header",
            "--redis-wait-replicas",
            "1",
            "--config-reload-interval",
            "1s",
        ]
        .map(String::from),
    );
    args.extend_from_slice(extra);
    args
}

async fn start_instance(name: &str, dir: &Path, extra: Vec<String>) -> Binary {
    let [grpc, http] = ports::<2>();
    let mut args = instance_args(dir, &extra);
    args.extend([
        "--grpc-addr".into(),
        format!("127.0.0.1:{grpc}"),
        "--http-addr".into(),
        format!("127.0.0.1:{http}"),
    ]);
    // `TOLLGATE_SOAK_B_BIN` runs instance B from another build and `TOLLGATE_SOAK_B_ENV`
    // (`K=V;K=V`) adds to its environment: a heap profiler's preload, on a build with
    // `--features system-allocator` (RELIABILITY.md, "the hour on an idle box").
    let b = name == "b";
    let program = match std::env::var("TOLLGATE_SOAK_B_BIN") {
        Ok(bin) if b => bin,
        _ => BIN.to_string(),
    };
    let env: Vec<(String, String)> = match std::env::var("TOLLGATE_SOAK_B_ENV") {
        Ok(vars) if b => vars
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        _ => Vec::new(),
    };
    let mut binary = Binary::start(Start {
        program: Path::new(&program),
        args,
        env,
        clear_env: true,
        grpc_port: grpc,
        http_port: http,
        log_path: Some(dir.parent().expect("a parent").join(format!("{name}.log"))),
    })
    .await;
    binary.wait_ready().await;
    binary
}

impl Fleet {
    pub async fn start(shape: Shape) -> Fleet {
        let netcut = Netcut::new();
        let cluster = blocking(|| LoopbackCluster::start(3, 1));
        cluster.config_set_all("hz", "100");
        let eu_primary = blocking(|| RedisServer::start_with(&["--hz", "100"], false));
        let eu_replica = {
            let port = eu_primary.port().to_string();
            blocking(move || {
                RedisServer::start_with(&["--hz", "100", "--replicaof", "127.0.0.1", &port], false)
            })
        };
        wait_replicated(&eu_primary);
        let proxy =
            DelayProxy::start("127.0.0.1", eu_primary.port(), Duration::from_millis(40)).await;
        let plane = ControlPlane::start(None);
        plane.set("v0", xds_config(0));

        let root = std::env::temp_dir().join(format!("tollgate-soak-{}", std::process::id()));
        let config_dir = root.join("config");
        std::fs::create_dir_all(&config_dir).expect("config directory");
        let period_s = shape.period.as_secs();
        std::fs::write(config_dir.join("soak.yaml"), soak_yaml(period_s, 0)).expect("write");
        std::fs::write(config_dir.join("soakxds.yaml"), XDS_YAML).expect("write");
        std::fs::write(config_dir.join("soakglobal.yaml"), GLOBAL_YAML).expect("write");

        let seed = cluster.seed_url();
        let home = format!("eu=redis://127.0.0.1:{}", proxy.port);
        let us = |extra: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = vec![
                "--redis-url".into(),
                seed.clone(),
                "--region".into(),
                "us".into(),
                "--region-redis".into(),
                home.clone(),
            ];
            v.extend(extra.iter().map(|s| s.to_string()));
            v
        };
        let a = start_instance("a", &config_dir, us(&[])).await;
        let b = start_instance("b", &config_dir, us(&[])).await;
        let x = start_instance(
            "x",
            &config_dir,
            vec![
                "--config-xds".into(),
                plane.addr.to_string(),
                "--redis-url".into(),
                seed.clone(),
                "--ready-needs-config".into(),
            ],
        )
        .await;
        let c = start_instance(
            "c",
            &config_dir,
            vec![
                "--redis-url".into(),
                eu_primary.url(),
                "--region".into(),
                "eu".into(),
            ],
        )
        .await;

        let backend = Backend::get();
        let [admin_port, envoy_port] = ports::<2>();
        let bootstrap = envoy_bootstrap(admin_port, envoy_port, backend.port, a.grpc_port());
        let envoy = Envoy::start(&bootstrap.to_string(), admin_port).await;
        let callers = Arc::new(Callers {
            us: [channel(&a.grpc_url).await, channel(&b.grpc_url).await],
            x: channel(&x.grpc_url).await,
            eu: channel(&c.grpc_url).await,
            envoy_port,
        });
        Fleet {
            shape,
            cluster,
            netcut,
            _eu: (eu_primary, eu_replica),
            _proxy: proxy,
            plane,
            config_dir,
            instances: vec![("A", a), ("B", b), ("X", x), ("C", c)],
            _envoy: envoy,
            callers,
            reloads: 0,
            xds_updates: 0,
            next_victim: 0,
            losses: Vec::new(),
        }
    }

    /// The global limit's load from both regions, all along.
    pub fn global_load(&self) -> GlobalLoad {
        GlobalLoad::start(self.callers.clone())
    }

    /// One period: wait for the next window to start, run its load, strike `fault` at 30% of
    /// it, then wait until the cluster is whole again.
    pub async fn period(&mut self, p: usize, fault: Fault) -> Tally {
        let period_ms = self.shape.period.as_millis() as u64;
        let start = (now_ms() / period_ms + 1) * period_ms;
        sleep_until_ms(start).await;
        let load = tokio::spawn(load::period(
            self.callers.clone(),
            p,
            fault,
            start,
            start + period_ms - 2_500,
        ));
        sleep_until_ms(start + period_ms * 3 / 10).await;
        let struck = faults::strike(self, fault).await;
        let tally = load.await.expect("the period's load");
        if fault == Fault::RestartEmpty {
            self.losses.push((start, start + period_ms));
        }
        faults::heal(self).await;
        tally.with_fault(struck)
    }

    /// What each process holds now.
    pub fn sample(&self) -> Sample {
        let rss = self
            .instances
            .iter()
            .map(|(_, b)| status_field(b.child.id(), "VmRSS:") as f64 / 1024.0)
            .collect();
        let threads = self
            .instances
            .iter()
            .map(|(_, b)| status_field(b.child.id(), "Threads:"))
            .collect();
        let redis: u64 = self
            .cluster
            .addrs()
            .iter()
            .filter(|a| self.cluster.pid(**a).is_some())
            .map(|a| used_memory(&self.cluster.cli(*a, &["INFO", "memory"])))
            .sum();
        Sample {
            rss_mib: rss,
            threads,
            redis_mib: redis as f64 / (1024.0 * 1024.0),
        }
    }

    /// Every panic any instance logged.
    pub fn panics(&self) -> Vec<String> {
        self.instances
            .iter()
            .flat_map(|(name, b)| {
                b.log()
                    .lines()
                    .filter(|l| l.contains("panicked"))
                    .map(|l| format!("instance {name} panicked: {l}"))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Stops every instance and removes the config and logs (kept on a failure: the test
    /// panics before).
    pub fn stop(&mut self) {
        for (_, b) in &mut self.instances {
            b.stop();
        }
    }

    pub fn remove_files(&self) {
        if let Some(root) = self.config_dir.parent() {
            let _ = std::fs::remove_dir_all(root);
        }
    }

    /// The cluster's primaries serving slots, as the first running node sees them.
    pub fn primaries(&self) -> Vec<Ipv4Addr> {
        let from = self
            .cluster
            .addrs()
            .into_iter()
            .find(|a| self.cluster.pid(*a).is_some())
            .expect("a running node");
        self.cluster
            .primaries(from)
            .into_iter()
            .map(|n| n.addr)
            .collect()
    }
}

fn wait_replicated(primary: &RedisServer) {
    for _ in 0..100 {
        if primary
            .cli(&["INFO", "replication"])
            .contains("state=online")
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("eu's replica never connected");
}

fn envoy_bootstrap(admin_port: u16, port: u16, backend: u16, rls: u16) -> serde_json::Value {
    let listener = json!({
        "name": "soak",
        "address": socket_address(port),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "soak",
                "route_config": {"virtual_hosts": [{"name": "soak", "domains": ["*"], "routes": [{
                    "match": {"prefix": "/"},
                    "route": {
                        "cluster": "backend",
                        "rate_limits": [{"actions": [{"request_headers": {"header_name": "x-tenant", "descriptor_key": "tenant"}}]}],
                    },
                }]}]},
                "http_filters": [
                    {
                        "name": "envoy.filters.http.ratelimit",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
                            "domain": "soak",
                            "timeout": "1s",
                            "failure_mode_deny": true,
                            "rate_limit_service": {
                                "transport_api_version": "V3",
                                "grpc_service": {"envoy_grpc": {"cluster_name": "rls"}},
                            },
                        },
                    },
                    {
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                    },
                ],
            },
        }]}],
    });
    json!({
        "admin": admin(admin_port),
        "static_resources": {
            "listeners": [listener],
            "clusters": [cluster("backend", backend, false), cluster("rls", rls, true)],
        },
    })
}

/// What a process holds, sampled after each period.
pub struct Sample {
    /// A, B, X, C.
    pub rss_mib: Vec<f64>,
    /// A, B, X, C: their threads (a diagnostic line beside the table: a step in RSS that
    /// comes with threads started and gone points at the allocator's per-thread heaps).
    pub threads: Vec<u64>,
    /// `used_memory` summed over the cluster's running nodes.
    pub redis_mib: f64,
}

/// A number from `/proc/<pid>/status` (`VmRSS:` in KiB, `Threads:`), 0 when gone.
fn status_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn used_memory(info: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// How memory grew over the last 30 minutes (the long form only).
pub struct Growth {
    /// (what, at the start of the last 30 minutes, at the end, growth) for each instance's RSS
    /// and Redis.
    rows: Vec<(String, f64, f64, f64)>,
}

/// One figure of a [`Sample`].
#[derive(Clone, Copy)]
enum Measure {
    /// An instance's RSS (A, B, X, C by index).
    Rss(usize),
    Redis,
}

impl Measure {
    fn of(self, s: &Sample) -> f64 {
        match self {
            Measure::Rss(i) => s.rss_mib[i],
            Measure::Redis => s.redis_mib,
        }
    }
}

/// The median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Memory at the end of the run against 30 minutes before it, each the median of 5 periods
/// (a fault's period alone moves Redis's figure: a node restarted empty, a resync).
pub fn growth(samples: &[Sample], shape: Shape) -> Growth {
    let per_30min = (1800 / shape.period.as_secs()) as usize;
    let mut rows = Vec::new();
    if samples.len() >= per_30min + 5 {
        let end = &samples[samples.len() - 5..];
        let start = &samples[samples.len() - per_30min - 5..samples.len() - per_30min];
        let mut series: Vec<(String, Measure)> = ["A", "B", "X", "C"]
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("RSS of {n}"), Measure::Rss(i)))
            .collect();
        series.push(("Redis used_memory".into(), Measure::Redis));
        for (name, m) in series {
            let a = median(start.iter().map(|s| m.of(s)).collect());
            let b = median(end.iter().map(|s| m.of(s)).collect());
            rows.push((name, a, b, if a > 0.0 { b / a - 1.0 } else { 0.0 }));
        }
    }
    Growth { rows }
}

impl Growth {
    pub fn summary(&self) -> String {
        if self.rows.is_empty() {
            return "memory growth over the last 30 minutes: not measured (the long form does)"
                .into();
        }
        let mut s = String::from("memory over the last 30 minutes (MiB, medians of 5 periods):\n");
        for (name, a, b, g) in &self.rows {
            s.push_str(&format!(
                "  {name}: {a:.1} -> {b:.1} ({:+.1}%)\n",
                g * 100.0
            ));
        }
        s
    }

    pub fn violations(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|(_, _, _, g)| *g > 0.05)
            .map(|(name, a, b, g)| {
                format!(
                    "{name} grew {:.1}% over the last 30 minutes ({a:.1} -> {b:.1} MiB)",
                    g * 100.0
                )
            })
            .collect()
    }
}
