//! Propagation speed of a config over xDS (issue 33): how long from the control plane
//! publishing an update to the new limit deciding, with decisions in flight throughout.
//!
//! For each size N: a control plane in this process (`tests/support/xds.rs`) and a `tollgate
//! serve --config-xds` child on the memory store. The config is one domain, `xdsbench`, with
//! N descriptor entries `k=v0` … `k=v{N-1}`, each with its own limit; `k=v0` is the probe,
//! alternately open (10^9 an hour) and closed (0 an hour: every decision OVER_LIMIT). While
//! `--clients` gRPC clients decide (half of them the probe, half random other entries, each
//! client on its own connection; in a closed loop, or together `--rate` decisions a second,
//! evenly paced), every run publishes the next version with the
//! probe flipped and records:
//!
//! - *propagation*: from the publish (`Snapshot::at`, taken as the control plane hands the
//!   encoded update to its streams) to the first probe answer, received by a client, that the
//!   new config decided (OK after opening, OVER_LIMIT after closing);
//! - *ACK*: from the publish to the control plane receiving tollgate's ACK of that version;
//! - *decisions*: every decision the clients made, from tollgate's first config to the end;
//!   *decisions/s* their rate over the measured updates;
//! - *failed*: those that ended in a gRPC error (any status, a deadline included: 5 s);
//! - *stale*: probe answers by the old config to calls sent after the first answer by the new
//!   one (a config that flipped back); *wrong*: background entries not answered OK.
//!
//! It also compiles the update's resources in this process, as tollgate does on receipt
//! (`compile_resources`), and drops the result, with no load: the share of propagation
//! that is compile work.
//!
//! Run by `scripts/bench-xds.sh`, or
//! `cargo bench --bench xds_propagation -- --tollgate target/release/tollgate [--sizes 1,100,10000] [--runs 20,20,10] [--clients 4] [--rate 0]`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::config::load::LoadOptions;
use tollgate::config::xds::resource::compile_resources;
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitRequest;
use tollgate::pb::rls_conf::RateLimitConfig;
use tonic::transport::{Channel, Endpoint};

/// tollgate's allocator (src/main.rs), so the in-process compile costs what tollgate's does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[allow(dead_code)]
#[path = "../tests/support/xds.rs"]
mod xds;

/// What `tests/support/xds.rs` takes from its sibling module.
mod server {
    pub fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a free port")
            .port()
    }
}

use xds::{domain, limit, ControlPlane, HOUR};

const DOMAIN: &str = "xdsbench";
/// The probe's limit while open: never reached within a run.
const OPEN: u32 = 1_000_000_000;
/// After the first new answer: how long the clients keep deciding before the next run (the
/// window in which a stale answer would show).
const SETTLE: Duration = Duration::from_millis(200);
/// The longest an update may take to be seen before the run is declared failed.
const GIVE_UP: Duration = Duration::from_secs(15);

struct Args {
    tollgate: PathBuf,
    sizes: Vec<usize>,
    runs: Vec<usize>,
    clients: usize,
    /// Decisions a second, all clients together; 0: a closed loop.
    rate: f64,
    /// `--compile-only REPS`: only compile each size's update REPS times in this process (no
    /// tollgate, no control plane), for a profiler.
    compile_only: Option<usize>,
}

fn args() -> Args {
    let mut a = Args {
        tollgate: PathBuf::from("target/release/tollgate"),
        sizes: vec![1, 100, 10_000],
        runs: vec![20, 20, 10],
        clients: 4,
        rate: 0.0,
        compile_only: None,
    };
    let list = |v: String| -> Vec<usize> {
        v.split(',')
            .map(|x| x.trim().parse().expect("a comma-separated list of numbers"))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--tollgate" => a.tollgate = PathBuf::from(value()),
            "--sizes" => a.sizes = list(value()),
            "--runs" => a.runs = list(value()),
            "--clients" => a.clients = value().parse().expect("--clients N"),
            "--rate" => a.rate = value().parse().expect("--rate DECISIONS_PER_SECOND"),
            "--compile-only" => a.compile_only = Some(value().parse().expect("--compile-only REPS")),
            // `cargo bench` passes this to every bench program.
            "--bench" => {}
            other => panic!(
                "unknown argument {other}; expected --tollgate PATH, --sizes N,N, --runs N,N, --clients N, --rate N, --compile-only REPS"
            ),
        }
    }
    assert!(
        a.clients >= 2,
        "--clients: at least 2 (a probe and a background client)"
    );
    assert!(!a.runs.is_empty(), "--runs: at least one count");
    a
}

/// Version `version`'s config: N entries, the probe closed or open.
fn config(n: usize, probe_closed: bool) -> Vec<RateLimitConfig> {
    let descriptors = (0..n)
        .map(|i| {
            let per_hour = match (i, probe_closed) {
                (0, true) => 0,
                (0, false) => OPEN,
                _ => 1_000_000,
            };
            limit("k", &format!("v{i}"), HOUR, per_hour)
        })
        .collect();
    vec![domain(DOMAIN, descriptors)]
}

fn request(value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: value.into(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}

/// One probe answer.
#[derive(Clone, Copy)]
struct Probe {
    sent: Instant,
    received: Instant,
    over: bool,
}

#[derive(Default)]
struct Load {
    stop: AtomicBool,
    probes: Mutex<Vec<Probe>>,
    decisions: AtomicU64,
    failed: AtomicU64,
    first_failure: Mutex<Option<String>>,
    wrong: AtomicU64,
}

impl Load {
    fn fail(&self, e: tonic::Status) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.first_failure
            .lock()
            .unwrap()
            .get_or_insert_with(|| format!("{e:?}"));
    }
}

/// Client `index`: even ones ask for the probe, odd ones for a random other entry (for N = 1,
/// `k=v1`, which no rule matches: answered OK).
/// `every`: the time between two of its calls' starts (None: each call as the last returns).
async fn client(
    index: usize,
    n: usize,
    every: Option<Duration>,
    channel: Channel,
    load: Arc<Load>,
) {
    let mut client = RateLimitServiceClient::new(channel);
    let mut pace = every.map(|d| {
        let mut i = tokio::time::interval(d);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    let probe = index.is_multiple_of(2);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ index as u64;
    while !load.stop.load(Ordering::Relaxed) {
        if let Some(pace) = pace.as_mut() {
            pace.tick().await;
        }
        let value = if probe {
            "v0".to_string()
        } else {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            format!("v{}", 1 + seed % (n.max(2) as u64 - 1))
        };
        let sent = Instant::now();
        let answer = client.should_rate_limit(request(&value)).await;
        let received = Instant::now();
        load.decisions.fetch_add(1, Ordering::Relaxed);
        match answer {
            Ok(r) => {
                let code = r.into_inner().overall_code;
                if probe {
                    load.probes.lock().unwrap().push(Probe {
                        sent,
                        received,
                        over: code == Code::OverLimit as i32,
                    });
                } else if code != Code::Ok as i32 {
                    load.wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => load.fail(e),
        }
    }
}

/// The tollgate child, killed when dropped.
struct Tollgate {
    child: Child,
    log: PathBuf,
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Tollgate {
    fn start(bin: &PathBuf, xds_port: u16, grpc_port: u16) -> Tollgate {
        let log =
            std::env::temp_dir().join(format!("tollgate-xds-bench-{}.log", std::process::id()));
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(bin)
            .args(["serve", "--log", "warn", "--config-xds"])
            .arg(format!("http://127.0.0.1:{xds_port}"))
            .arg("--grpc-addr")
            .arg(format!("127.0.0.1:{grpc_port}"))
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{}", server::free_port()))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        Tollgate { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Nearest-rank percentile `q` (0..=1) of `v`, sorted here.
fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// In-process compile and drop of `resources`, with no load: medians of 5, in ms.
fn compile_cost(resources: &[prost_types::Any]) -> (f64, f64) {
    let (mut compile, mut drop) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        let config = compile_resources(resources, &LoadOptions::default()).expect("compiles");
        compile.push(ms(t.elapsed()));
        let t = Instant::now();
        std::mem::drop(config);
        drop.push(ms(t.elapsed()));
    }
    (pct(&mut compile, 0.5), pct(&mut drop, 0.5))
}

async fn connect(port: u16, tollgate: &Tollgate) -> Channel {
    let endpoint = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5));
    let deadline = Instant::now() + GIVE_UP;
    loop {
        match endpoint.connect().await {
            Ok(c) => return c,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("tollgate does not listen: {e:?}; log: {}", tollgate.log()),
        }
    }
}

/// Waits until a probe answer received after `since` says `over` (closed); its receipt.
async fn seen(load: &Load, since: Instant, over: bool, tollgate: &Tollgate) -> Instant {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        if let Some(p) = load
            .probes
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.received >= since && p.over == over)
        {
            return p.received;
        }
        assert!(
            Instant::now() < deadline,
            "no probe answer by the new config within {GIVE_UP:?}; log: {}",
            tollgate.log()
        );
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

struct Row {
    n: usize,
    bytes: usize,
    runs: usize,
    propagation: Vec<f64>,
    ack: Vec<f64>,
    compile: f64,
    drop: f64,
    decisions: u64,
    per_sec: f64,
    failed: u64,
    stale: usize,
    wrong: u64,
}

async fn size(a: &Args, n: usize, runs: usize) -> Row {
    let plane = ControlPlane::start(None);
    let first = plane.set("1", config(n, false));
    let bytes = first.resources.iter().map(|r| r.value.len()).sum();
    let (compile, drop) = compile_cost(&config(n, true).iter().map(xds::any).collect::<Vec<_>>());
    let grpc_port = server::free_port();
    let tollgate = Tollgate::start(&a.tollgate, plane.addr.port(), grpc_port);
    plane.wait_ack("1", 0).await;

    let load = Arc::new(Load::default());
    let mut tasks = Vec::new();
    let every = (a.rate > 0.0).then(|| Duration::from_secs_f64(a.clients as f64 / a.rate));
    for i in 0..a.clients {
        let channel = connect(grpc_port, &tollgate).await;
        tasks.push(tokio::spawn(client(i, n, every, channel, load.clone())));
    }
    // Version 1 (probe open) decides before the first measured update.
    seen(&load, first.at, false, &tollgate).await;

    let (mut propagation, mut ack, mut stale) = (Vec::new(), Vec::new(), 0);
    let started = Instant::now();
    let decisions0 = load.decisions.load(Ordering::Relaxed);
    for run in 0..runs {
        let closed = run.is_multiple_of(2);
        let version = (run + 2).to_string();
        let update = config(n, closed);
        load.probes.lock().unwrap().clear();
        let from = plane.received().len();
        let snapshot = plane.set(&version, update);
        let acked = plane.wait_ack(&version, from).await;
        let new = seen(&load, snapshot.at, closed, &tollgate).await;
        propagation.push(ms(new - snapshot.at));
        ack.push(ms(acked.at - snapshot.at));
        tokio::time::sleep(SETTLE).await;
        stale += load
            .probes
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.sent > new && p.over != closed)
            .count();
    }
    let elapsed = started.elapsed();
    let per_sec =
        (load.decisions.load(Ordering::Relaxed) - decisions0) as f64 / elapsed.as_secs_f64();
    load.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    if let Some(e) = load.first_failure.lock().unwrap().as_ref() {
        eprintln!("N={n}: first failed decision: {e}");
    }
    Row {
        n,
        bytes,
        runs,
        propagation,
        ack,
        compile,
        drop,
        decisions: load.decisions.load(Ordering::Relaxed),
        per_sec,
        failed: load.failed.load(Ordering::Relaxed),
        stale,
        wrong: load.wrong.load(Ordering::Relaxed),
    }
}

fn main() {
    let a = args();
    if let Some(reps) = a.compile_only {
        for &n in &a.sizes {
            let resources: Vec<_> = config(n, true).iter().map(xds::any).collect();
            let t = Instant::now();
            for _ in 0..reps {
                compile_resources(&resources, &LoadOptions::default()).expect("compiles");
            }
            println!(
                "N={n}: {:.3} ms per compile and drop",
                ms(t.elapsed()) / reps as f64
            );
        }
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let pacing = if a.rate > 0.0 {
        format!("{} decisions/s in all, evenly paced", a.rate)
    } else {
        "a closed loop".to_string()
    };
    println!(
        "xDS propagation: one domain of N entries, probe flipped per run; {} clients (half on the probe), {pacing}; ms from the control plane's publish",
        a.clients
    );
    println!();
    println!("| N | resource bytes | runs | propagation p50 | p90 | max | ACK p50 | p90 | max | compile in-process | drop | decisions | decisions/s | failed | stale | wrong |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, &n) in a.sizes.iter().enumerate() {
        let runs = *a.runs.get(i).unwrap_or(a.runs.last().expect("runs"));
        let mut r = rt.block_on(size(&a, n, runs));
        let p = |v: &mut Vec<f64>| {
            format!(
                "{:.2} | {:.2} | {:.2}",
                pct(v, 0.5),
                pct(v, 0.9),
                pct(v, 1.0)
            )
        };
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {:.0} | {} | {} | {} |",
            r.n,
            r.bytes,
            r.runs,
            p(&mut r.propagation),
            p(&mut r.ack),
            r.compile,
            r.drop,
            r.decisions,
            r.per_sec,
            r.failed,
            r.stale,
            r.wrong
        );
    }
}
