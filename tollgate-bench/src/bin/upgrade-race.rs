//! `upgrade-race`: two releases of tollgate on one Redis, as a rolling upgrade has them
//! (`scripts/upgrade-check.sh` builds both and runs this on a Redis and on a Cluster).
//!
//! Instance A runs `--old`, instance B `--new`, on the same Redis and key prefix. Callers race
//! on limits of every kind through both (fixed, sliding, bucket and calendar windows, a tenant
//! limit under a shared pool, a concurrency cap, reservations, class shares, a fair share, a
//! money budget, a token bucket that holds answers with `max_wait`, a global limit whose home
//! is the instances' own region); then A is drained and
//! replaced by `--new` on the same ports, mid-window, and the callers go on. What each limit
//! admitted in all is checked against what one release alone would admit:
//!
//! - every window limit admits exactly its limit (demand is 1.5 times it, half before the
//!   replacement and half after, so what the first half charged must be seen after it);
//! - a slot held or a reservation made on one release is released or settled on the other,
//!   and what that frees is exactly what the next callers get;
//! - the fair share's active tenants are counted once across both releases;
//! - the global limit admits at most its limit, from the authority and the region's lease both
//!   releases read and write (its state JSON, the pool's fields);
//! - no call fails (the drained instance gets no calls; a call answered with an error, by
//!   either release, fails the run).
//!
//! Windows are a day long (a month for the calendar), so the run never crosses one; a run that
//! starts within a minute of midnight UTC waits for it to pass. Prints what it found and exits
//! non-zero on any difference.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Parser;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitRequest;
use tollgate::pb::tollgate::reservations::v1::reservations_client::ReservationsClient;
use tollgate::pb::tollgate::reservations::v1::SettleRequest;
use tollgate::pb::tollgate::slots::v1::slots_client::SlotsClient;
use tollgate::pb::tollgate::slots::v1::SlotRequest;
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Parser)]
#[command(
    name = "upgrade-race",
    about = "Two tollgate releases racing on one Redis"
)]
struct Args {
    /// The previous release's binary (instance A until it is replaced).
    #[arg(long)]
    old: PathBuf,
    /// The new release's binary (instance B, and A's replacement).
    #[arg(long)]
    new: PathBuf,
    /// The Redis both use (`redis://…` or `redis-cluster://…`).
    #[arg(long)]
    redis_url: String,
    /// Where the config and the instances' logs go.
    #[arg(long)]
    work: PathBuf,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
}

const DOMAIN: &str = "upgrade";

/// Every limit is a day (or a calendar month) long: the run never sees one end.
const CONFIG: &str = "\
domain: upgrade
prices:
  currency: USD
  per_million_tokens:
    m1: {input: 1.00, output: 2.00}
descriptors:
  - key: fixed
    rate_limit: {unit: day, requests_per_unit: 40}
  - key: sliding
    rate_limit: {unit: day, requests_per_unit: 40, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: day, requests_per_unit: 40, algorithm: token_bucket}
  - key: calendar
    rate_limit: {calendar: month, timezone: UTC, requests_per_unit: 40}
  - key: tenant
    rate_limits:
      - {name: per-tenant, unit: day, requests_per_unit: 10}
      - {name: tenants-pool, unit: day, requests_per_unit: 60, shared: true}
  - key: slots
    rate_limit: {algorithm: concurrency, requests_per_unit: 6, lease_ttl: 10m}
  - key: rsv
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: classes
    hierarchical: true
    rate_limit:
      {name: class-pool, unit: day, requests_per_unit: 100, shared: true,
       shares: {by: priority, classes: {interactive: 0.5, batch: 0.2}, default: batch, borrow_until: 0.8}}
    descriptors: [{key: priority}]
  - key: fair
    hierarchical: true
    rate_limit: {name: fair-pool, unit: day, requests_per_unit: 60, shared: true, fair_share: {by: tenant}}
    descriptors: [{key: tenant}]
  - key: spend
    hierarchical: true
    rate_limit: {name: daily-spend, unit: day, spend: 0.01}
  - key: wait
    rate_limit: {unit: second, requests_per_unit: 20, algorithm: token_bucket, max_wait: 400ms}
  - key: global
    rate_limit:
      {name: global-day, unit: day, requests_per_unit: GLOBAL_LIMIT, shared: true,
       global: {home: REGION, regions: [REGION]}}
";

/// The region both instances name (`--region`): home to the global limit.
const REGION: &str = "home";
/// The global limit's requests a day; each half of the run asks it for three quarters.
const GLOBAL_LIMIT: u64 = 400;

/// The config file, its global limit filled in.
fn config() -> String {
    CONFIG
        .replace("GLOBAL_LIMIT", &GLOBAL_LIMIT.to_string())
        .replace("REGION", REGION)
}

/// Keys per window kind, and each one's limit.
const WINDOW_KEYS: u64 = 6;
const WINDOW_LIMIT: u64 = 40;

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs
        .iter()
        .map(|(k, v)| Entry {
            key: (*k).into(),
            value: (*v).into(),
        })
        .collect()
}

fn descriptor(pairs: &[(&str, &str)], cost: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries(pairs),
        hits_addend: Some(cost),
        ..Default::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors,
        hits_addend: 0,
    }
}

// ------------------------------------------------------------------------------- instances

/// One tollgate process, by binary; its ports stay when it is replaced.
struct Instance {
    name: &'static str,
    child: Mutex<Option<Child>>,
    grpc: u16,
    http: u16,
    /// Callers may pick it (false while it drains and restarts).
    up: AtomicBool,
    /// Calls to it in flight.
    in_flight: AtomicU64,
    channel: Mutex<Option<Channel>>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Instance {
    fn start(
        name: &'static str,
        bin: &PathBuf,
        args: &Args,
        ports: Option<(u16, u16)>,
    ) -> anyhow::Result<Instance> {
        let (grpc, http) = match ports {
            Some(p) => p,
            None => (free_port()?, free_port()?),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(args.work.join(format!("{name}.log")))?;
        let child = Command::new(bin)
            .args(["--log", "warn", "serve", "--config"])
            .arg(args.work.join("upgrade.yaml"))
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args(["--redis-url", &args.redis_url])
            .args(["--region", REGION])
            // Both releases get the same generous deadline: this run is about what they
            // count, not about a busy box's latency.
            .args(["--redis-timeout", "2s"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Instance {
            name,
            child: Mutex::new(Some(child)),
            grpc,
            http,
            up: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            channel: Mutex::new(None),
        })
    }

    /// Waits until `/readyz` answers 200 (Redis reachable, config loaded), then connects.
    async fn ready(&self) -> anyhow::Result<()> {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if http_status(self.http, "/readyz").await == Some(200) {
                break;
            }
            if Instant::now() > until {
                bail!("{} did not become ready in 30 s", self.name);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let channel = Endpoint::from_shared(format!("http://127.0.0.1:{}", self.grpc))?
            .connect()
            .await?;
        *self.channel.lock() = Some(channel);
        self.up.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Takes it out of rotation, waits for its calls to finish, and stops it as Kubernetes
    /// does (SIGTERM: it drains and hands back what it holds).
    async fn stop(&self) -> anyhow::Result<()> {
        self.up.store(false, Ordering::SeqCst);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        *self.channel.lock() = None;
        let child = self.child.lock().take();
        if let Some(mut child) = child {
            let pid = child.id().to_string();
            Command::new("kill").args(["-TERM", &pid]).status()?;
            let until = Instant::now() + Duration::from_secs(20);
            while child.try_wait()?.is_none() {
                if Instant::now() > until {
                    child.kill()?;
                    bail!("{} did not stop within 20 s of SIGTERM", self.name);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An HTTP/1.0 GET's status code on loopback, or `None`.
async fn http_status(port: u16, path: &str) -> Option<u16> {
    Some(http_get(port, path).await?.0)
}

async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).await.ok()?;
    let status = body.split(' ').nth(1)?.parse().ok()?;
    let text = body.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, text))
}

// ----------------------------------------------------------------------------------- calls

/// Both instances, and what every call saw.
struct Fleet {
    instances: [Mutex<Arc<Instance>>; 2],
    next: AtomicU64,
    errors: Mutex<Vec<String>>,
}

/// One call's answer: admitted or not, and the id it carried (a slot's, a reservation's).
struct Answer {
    ok: bool,
    id: String,
}

impl Fleet {
    /// The instances in turn, skipping one that is out of rotation. `prefer` picks one.
    fn pick(&self, prefer: Option<usize>) -> Arc<Instance> {
        let n = self.next.fetch_add(1, Ordering::Relaxed) as usize;
        let order = match prefer {
            Some(i) => [i, 1 - i],
            None => [n % 2, (n + 1) % 2],
        };
        for i in order {
            let instance = self.instances[i].lock().clone();
            if instance.up.load(Ordering::SeqCst) {
                instance.in_flight.fetch_add(1, Ordering::SeqCst);
                // Taken out of rotation between the two loads: give it back.
                if instance.up.load(Ordering::SeqCst) {
                    return instance;
                }
                instance.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // Both out of rotation never happens: one is replaced at a time.
        let instance = self.instances[1].lock().clone();
        instance.in_flight.fetch_add(1, Ordering::SeqCst);
        instance
    }

    fn failed(&self, what: String) {
        self.errors.lock().push(what);
    }

    /// One call through an instance in rotation (or `prefer`).
    async fn call(&self, op: &Op, prefer: Option<usize>) -> Answer {
        let instance = self.pick(prefer);
        let channel = instance.channel.lock().clone();
        let answer = match channel {
            Some(c) => op.send(c).await,
            None => Err(format!("{} has no connection", instance.name)),
        };
        instance.in_flight.fetch_sub(1, Ordering::SeqCst);
        match answer {
            Ok(a) => a,
            Err(e) => {
                self.failed(format!("{} via {}: {e}", op.label(), instance.name));
                Answer {
                    ok: false,
                    id: String::new(),
                }
            }
        }
    }
}

/// What a caller asks.
#[derive(Clone)]
enum Op {
    /// `ShouldRateLimit` with these descriptors.
    Decide(&'static str, Vec<RateLimitDescriptor>),
    /// `Slots/Acquire`, `Slots/Release`.
    Acquire(Vec<RateLimitDescriptor>),
    Release(Vec<RateLimitDescriptor>, String),
    /// `Reservations/Reserve`, `Reservations/Settle`.
    Reserve(Vec<RateLimitDescriptor>),
    Settle(Vec<RateLimitDescriptor>, String),
}

impl Op {
    fn label(&self) -> &'static str {
        match self {
            Op::Decide(kind, _) => kind,
            Op::Acquire(_) => "acquire",
            Op::Release(..) => "release",
            Op::Reserve(_) => "reserve",
            Op::Settle(..) => "settle",
        }
    }

    async fn send(&self, channel: Channel) -> Result<Answer, String> {
        let admitted = |code: i32| match Code::try_from(code) {
            Ok(Code::Ok) => Ok(true),
            Ok(Code::OverLimit) => Ok(false),
            _ => Err(format!("overall code {code}")),
        };
        let grpc = |s: tonic::Status| format!("{:?}: {}", s.code(), s.message());
        match self {
            Op::Decide(_, d) => {
                let mut c = RateLimitServiceClient::new(channel);
                let r = c.should_rate_limit(request(d.clone())).await;
                let r = r.map_err(grpc)?.into_inner();
                Ok(Answer {
                    ok: admitted(r.overall_code)?,
                    id: String::new(),
                })
            }
            Op::Acquire(d) => {
                let mut c = SlotsClient::new(channel);
                let r = c.acquire(request(d.clone())).await.map_err(grpc)?;
                let r = r.into_inner();
                let code = r.decision.map_or(0, |d| d.overall_code);
                Ok(Answer {
                    ok: admitted(code)?,
                    id: r.slot_id,
                })
            }
            Op::Release(d, id) => {
                let mut c = SlotsClient::new(channel);
                let r = c
                    .release(SlotRequest {
                        domain: DOMAIN.into(),
                        descriptors: d.clone(),
                        slot_id: id.clone(),
                    })
                    .await
                    .map_err(grpc)?;
                Ok(Answer {
                    ok: r.into_inner().limits == 1,
                    id: id.clone(),
                })
            }
            Op::Reserve(d) => {
                let mut c = ReservationsClient::new(channel);
                let r = c.reserve(request(d.clone())).await.map_err(grpc)?;
                let r = r.into_inner();
                let code = r.decision.map_or(0, |d| d.overall_code);
                Ok(Answer {
                    ok: admitted(code)?,
                    id: r.reservation_id,
                })
            }
            Op::Settle(d, id) => {
                let mut c = ReservationsClient::new(channel);
                let r = c
                    .settle(SettleRequest {
                        domain: DOMAIN.into(),
                        descriptors: d.clone(),
                        reservation_id: id.clone(),
                    })
                    .await
                    .map_err(grpc)?;
                Ok(Answer {
                    ok: r.into_inner().limits == 1,
                    id: id.clone(),
                })
            }
        }
    }
}

/// Runs `ops` with `concurrency` in flight through the fleet; per op, its answer.
async fn race(
    fleet: &Arc<Fleet>,
    ops: Vec<(String, Op)>,
    concurrency: usize,
) -> Vec<(String, Answer)> {
    let ops = Arc::new(Mutex::new(ops.into_iter().enumerate().collect::<Vec<_>>()));
    let out = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (ops, out, fleet) = (ops.clone(), out.clone(), fleet.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let Some((_, (name, op))) = ops.lock().pop() else {
                    return;
                };
                let answer = fleet.call(&op, None).await;
                out.lock().push((name, answer));
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    let mut out = out.lock();
    std::mem::take(&mut *out)
}

/// A fixed shuffle (xorshift), so a run's order is the same every time.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(args))
}

// ---------------------------------------------------------------------------------- the run

fn decide(kind: &'static str, name: String, pairs: &[(&str, &str)], cost: u64) -> (String, Op) {
    (name, Op::Decide(kind, vec![descriptor(pairs, cost)]))
}

/// What both halves ask of the limits that need no id: window limits, tenants under a pool,
/// the class pool, the fair pool, money, the waiting bucket. `half` is 0 before the
/// replacement, 1 after.
fn window_ops(half: usize) -> Vec<(String, Op)> {
    let mut ops = Vec::new();
    for kind in ["fixed", "sliding", "bucket", "calendar"] {
        for k in 0..WINDOW_KEYS {
            let v = format!("k{k}");
            for _ in 0..WINDOW_LIMIT * 3 / 4 {
                ops.push(decide(kind, format!("{kind}:{v}"), &[(kind, &v)], 1));
            }
        }
    }
    for t in 0..8 {
        let v = format!("t{t}");
        for _ in 0..6 {
            ops.push(decide(
                "tenant",
                format!("tenant:{v}"),
                &[("tenant", &v)],
                1,
            ));
        }
    }
    // Batch floods the class pool before the replacement; interactive comes after it.
    let (class, n) = if half == 0 {
        ("batch", 120)
    } else {
        ("interactive", 40)
    };
    for _ in 0..n {
        let pairs = [("classes", "pool"), ("priority", class)];
        ops.push(decide("classes", format!("classes:{class}"), &pairs, 1));
    }
    // Five tenants before, five others after: ten active in the window, counted once.
    for t in 0..5 {
        let v = format!("f{}", t + 5 * half);
        for _ in 0..8 {
            ops.push(decide(
                "fair",
                format!("fair:{v}"),
                &[("fair", "pool"), ("tenant", &v)],
                1,
            ));
        }
    }
    for _ in 0..7 {
        let pairs = [("spend", "acme"), ("model", "m1"), ("kind", "input")];
        ops.push(decide("spend", "spend".into(), &pairs, 1000));
    }
    for _ in 0..60 {
        ops.push(decide("wait", "wait".into(), &[("wait", "w")], 1));
    }
    for _ in 0..GLOBAL_LIMIT * 3 / 4 {
        ops.push(decide("global", "global".into(), &[("global", "g")], 1));
    }
    ops
}

/// One global call at a time through A and B in turn until each has admitted one (a lease
/// has reached the region), for at most 10 s; every answer.
async fn warm_global(fleet: &Fleet) -> Vec<(String, Answer)> {
    let mut answers = Vec::new();
    let mut admitted = [false; 2];
    let until = Instant::now() + Duration::from_secs(10);
    let mut i = 0;
    while admitted != [true, true] && Instant::now() < until {
        let (name, op) = decide("global", "global".into(), &[("global", "g")], 1);
        let answer = fleet.call(&op, Some(i % 2)).await;
        admitted[i % 2] |= answer.ok;
        answers.push((name, answer));
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    answers
}

fn slot_d() -> Vec<RateLimitDescriptor> {
    vec![descriptor(&[("slots", "s")], 1)]
}

fn rsv_d(cost: u64) -> Vec<RateLimitDescriptor> {
    vec![descriptor(&[("rsv", "r")], cost)]
}

/// How many of `answers` named `name` were admitted.
fn admitted(answers: &[(String, Answer)], name: &str) -> u64 {
    answers.iter().filter(|(n, a)| n == name && a.ok).count() as u64
}

fn ids(answers: &[(String, Answer)], name: &str) -> Vec<String> {
    answers
        .iter()
        .filter(|(n, a)| n == name && a.ok)
        .map(|(_, a)| a.id.clone())
        .collect()
}

/// What the run found: each line `what: got (want …)`, and whether all held.
#[derive(Default)]
struct Findings {
    lines: Vec<String>,
    failed: bool,
}

impl Findings {
    fn check(&mut self, what: &str, ok: bool, got: impl std::fmt::Display, want: &str) {
        let mark = if ok { "ok  " } else { "FAIL" };
        self.lines.push(format!("{mark} {what}: {got} ({want})"));
        self.failed |= !ok;
    }

    fn exactly(&mut self, what: &str, got: u64, want: u64) {
        self.check(what, got == want, got, &format!("want exactly {want}"));
    }
}

/// Waits out the last minute of a UTC day: a day window must not end during the run.
async fn away_from_midnight() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let left = 86_400 - now % 86_400;
    if left < 90 {
        eprintln!("upgrade-race: waiting {left} s for the UTC day to turn");
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}

/// `used` of the counter named `name` in `/counters`' JSON.
fn counter_used(json: &serde_json::Value, name: &str) -> Option<u64> {
    match json {
        serde_json::Value::Object(o) => {
            if o.get("name").and_then(|n| n.as_str()) == Some(name) {
                return o.get("used").and_then(|u| u.as_u64());
            }
            o.values().find_map(|v| counter_used(v, name))
        }
        serde_json::Value::Array(a) => a.iter().find_map(|v| counter_used(v, name)),
        _ => None,
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.work)?;
    std::fs::write(args.work.join("upgrade.yaml"), config())?;
    away_from_midnight().await;
    let a = Arc::new(Instance::start("a-old", &args.old, &args, None)?);
    let b = Arc::new(Instance::start("b-new", &args.new, &args, None)?);
    a.ready().await?;
    b.ready().await?;
    let fleet = Arc::new(Fleet {
        instances: [Mutex::new(a.clone()), Mutex::new(b.clone())],
        next: AtomicU64::new(0),
        errors: Mutex::new(Vec::new()),
    });
    let mut f = Findings::default();
    // The global limit's region holds no lease until its refill task has asked home: ask
    // through both releases until each has admitted one, so both halves race on leases.
    let warm = warm_global(&fleet).await;
    let started = Instant::now();

    // Before the replacement: both releases race.
    let mut ops = window_ops(0);
    ops.extend((0..10).map(|_| ("acquire".to_string(), Op::Acquire(slot_d()))));
    ops.extend((0..12).map(|_| ("reserve".to_string(), Op::Reserve(rsv_d(100)))));
    shuffle(&mut ops, 0x5eed);
    let first = race(&fleet, ops, args.concurrency).await;
    f.exactly(
        "slots acquired on both releases",
        admitted(&first, "acquire"),
        6,
    );
    f.exactly(
        "reservations of 100 of 1000",
        admitted(&first, "reserve"),
        10,
    );
    // Half the slots released, half the reservations settled at 40, each through the
    // release that did not take it (which one did is not known: both are asked in turn).
    let slots = ids(&first, "acquire");
    let reservations = ids(&first, "reserve");
    let mut crossed = Vec::new();
    for (i, id) in slots.iter().take(3).enumerate() {
        crossed.push(("release".to_string(), Op::Release(slot_d(), id.clone()), i));
    }
    for (i, id) in reservations.iter().take(5).enumerate() {
        crossed.push(("settle".to_string(), Op::Settle(rsv_d(40), id.clone()), i));
    }
    for (name, op, i) in crossed {
        let answer = fleet.call(&op, Some(i % 2)).await;
        f.check(
            &format!("{name} {}", answer.id),
            answer.ok,
            answer.ok,
            "found",
        );
    }

    // The rolling update: A (old) drained and stopped, then started again as the new release
    // on its ports, mid-window.
    let replaced_at = started.elapsed();
    a.stop().await?;
    let a2 = Arc::new(Instance::start(
        "a-new",
        &args.new,
        &args,
        Some((a.grpc, a.http)),
    )?);
    *fleet.instances[0].lock() = a2.clone();
    a2.ready().await?;

    // After it: the other settles (of reservations the old release made), then the race again.
    for (i, id) in reservations.iter().skip(5).enumerate() {
        let answer = fleet
            .call(&Op::Settle(rsv_d(40), id.clone()), Some(i % 2))
            .await;
        f.check(
            &format!("settle {id} after the upgrade"),
            answer.ok,
            answer.ok,
            "found",
        );
    }
    let mut ops = window_ops(1);
    ops.extend((0..10).map(|_| ("acquire".to_string(), Op::Acquire(slot_d()))));
    ops.extend((0..12).map(|_| ("reserve".to_string(), Op::Reserve(rsv_d(100)))));
    shuffle(&mut ops, 0xfeed);
    let second = race(&fleet, ops, args.concurrency).await;
    let elapsed = started.elapsed();
    f.exactly(
        "slots acquired after 3 of 6 were released",
        admitted(&second, "acquire"),
        3,
    );
    f.exactly(
        "reservations of 100 once 10 were settled at 40",
        admitted(&second, "reserve"),
        6,
    );
    for (i, id) in slots
        .iter()
        .skip(3)
        .chain(ids(&second, "acquire").iter())
        .enumerate()
    {
        let answer = fleet
            .call(&Op::Release(slot_d(), id.clone()), Some(i % 2))
            .await;
        f.check(
            &format!("release {id} after the upgrade"),
            answer.ok,
            answer.ok,
            "found",
        );
    }

    let halves = (admitted(&first, "global"), admitted(&second, "global"));
    let warmed = admitted(&warm, "global");
    let both: Vec<(String, Answer)> = warm.into_iter().chain(first).chain(second).collect();
    for kind in ["fixed", "sliding", "bucket", "calendar"] {
        for k in 0..WINDOW_KEYS {
            let name = format!("{kind}:k{k}");
            f.exactly(
                &format!("{name} of {WINDOW_LIMIT}"),
                admitted(&both, &name),
                WINDOW_LIMIT,
            );
        }
    }
    let tenants: BTreeMap<String, u64> = (0..8)
        .map(|t| (format!("t{t}"), admitted(&both, &format!("tenant:t{t}"))))
        .collect();
    f.exactly("tenants under a pool of 60", tenants.values().sum(), 60);
    let most = tenants.values().copied().max().unwrap_or(0);
    f.check(
        "the busiest tenant of its 10",
        most <= 10,
        most,
        "want at most 10",
    );
    f.exactly(
        "batch in a class pool (borrow_until 80)",
        admitted(&both, "classes:batch"),
        80,
    );
    f.exactly(
        "interactive after batch borrowed",
        admitted(&both, "classes:interactive"),
        20,
    );
    let fair: u64 = (0..10)
        .map(|t| admitted(&both, &format!("fair:f{t}")))
        .sum();
    f.exactly("a fair-share pool of 60", fair, 60);
    let q = "/counters?domain=upgrade&descriptor=fair%3Dpool%2Ctenant%3Df0";
    let active = match http_get(a2.http, q).await {
        Some((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|j| counter_used(&j, "fair-pool/active_tenants")),
        other => bail!("GET {q}: {other:?}"),
    };
    f.check(
        "the fair pool's active tenants, read on the new release",
        active == Some(10),
        format!("{active:?}"),
        "want Some(10)",
    );
    f.exactly(
        "spends of 0.001 USD in 0.01 USD",
        admitted(&both, "spend"),
        10,
    );
    // A bucket of 20 refilling 20 a second, over the whole run (its holds included).
    let waited = admitted(&both, "wait");
    let most = 20 + (20.0 * elapsed.as_secs_f64()).ceil() as u64;
    f.check(
        "max_wait's bucket",
        waited <= most,
        waited,
        &format!("want at most {most}"),
    );
    // A global limit's region spends leases of the authority's limit: never more than it, and
    // (the authority on the same Redis) some of it in each half.
    let global = admitted(&both, "global");
    f.check(
        "a global limit of 400, its home this region",
        global <= GLOBAL_LIMIT && halves.0 > 0 && halves.1 > 0,
        format!(
            "{global} ({warmed} while its lease came, {} before the replacement, {} after)",
            halves.0, halves.1
        ),
        "want at most 400, some in each half",
    );
    let errors = fleet.errors.lock().clone();
    f.check(
        "calls answered with an error",
        errors.is_empty(),
        errors.len(),
        "want 0",
    );

    println!(
        "upgrade-race on {}: old {} beside new {}, A replaced at {:.1} s of {:.1} s",
        args.redis_url,
        args.old.display(),
        args.new.display(),
        replaced_at.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    for line in &f.lines {
        println!("  {line}");
    }
    for e in errors.iter().take(20) {
        println!("  error: {e}");
    }
    if f.failed {
        bail!(
            "the two releases did not keep one count (logs in {})",
            args.work.display()
        );
    }
    Ok(())
}
