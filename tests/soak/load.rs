//! The soak's callers: a period's calls on fresh keys of every kind of limit, paced over the
//! period in two halves (a reservation settled between them, batch before interactive on the
//! class pool, new fair-share tenants in the second), what each key may admit, and the global
//! limit's load from both regions all along.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::pb::tollgate::reservations::v1::reservations_client::ReservationsClient;
use tollgate::pb::tollgate::reservations::v1::SettleRequest;
use tollgate::pb::tollgate::slots::v1::slots_client::SlotsClient;
use tollgate::pb::tollgate::slots::v1::SlotRequest;

use crate::faults::{Fault, Struck};
use crate::fleet::{Callers, Sample};
use crate::{now_ms, sleep_until_ms};

/// Every call's deadline (sent as `grpc-timeout`).
const CALL_TIMEOUT: Duration = Duration::from_secs(1);
const FAILURE_HEADER: &str = "x-tollgate-store-failure";

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Over,
    /// OVER_LIMIT from the failure policy (the store failed).
    Failure,
    Error,
}

/// What a caller asks, and through which door.
#[derive(Clone)]
enum Op {
    /// `ShouldRateLimit` on A or B (`x`: also on X).
    Decide {
        d: Vec<RateLimitDescriptor>,
        x: bool,
    },
    /// An HTTP request through Envoy with `x-tenant`.
    Envoy(String),
    Acquire(RateLimitDescriptor),
    Reserve(RateLimitDescriptor),
}

fn entry(k: &str, v: &str) -> Entry {
    Entry {
        key: k.into(),
        value: v.into(),
    }
}

fn desc(pairs: &[(&str, &str)], cost: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs.iter().map(|(k, v)| entry(k, v)).collect(),
        hits_addend: Some(cost),
        ..Default::default()
    }
}

fn request(domain: &str, d: Vec<RateLimitDescriptor>) -> tonic::Request<RateLimitRequest> {
    let mut r = tonic::Request::new(RateLimitRequest {
        domain: domain.into(),
        descriptors: d,
        hits_addend: 0,
    });
    r.set_timeout(CALL_TIMEOUT);
    r
}

fn outcome_of(r: &RateLimitResponse) -> Outcome {
    let failed = r
        .response_headers_to_add
        .iter()
        .any(|h| h.key == FAILURE_HEADER);
    match Code::try_from(r.overall_code) {
        Ok(Code::Ok) => Outcome::Ok,
        Ok(Code::OverLimit) if failed => Outcome::Failure,
        Ok(Code::OverLimit) => Outcome::Over,
        _ => Outcome::Error,
    }
}

/// A period's counts, and what each key may admit.
#[derive(Default)]
pub struct Tally {
    calls: u64,
    ok: u64,
    over: u64,
    failure: u64,
    errors: Vec<String>,
    /// Per key (or group of keys): admitted, and the most it may admit.
    admitted: BTreeMap<String, (u64, u64)>,
    reservations_made: u64,
    reservations_settled: u64,
    /// Settles that found no record (the primary holding it restarted empty).
    reservations_lost: u64,
    /// Settles retried after an attempt failed, that then found no record: the failed
    /// attempt may have settled it (a settle is idempotent, its answer was lost).
    reservations_ambiguous: u64,
    /// Reservations neither settled nor lost by the end (a violation).
    reservations_pending: Vec<String>,
    struck: String,
    /// A promise the fault itself broke (see [`Struck::broke`]).
    broke: Option<String>,
}

impl Tally {
    fn count(&mut self, group: &str, outcome: Outcome, what: &str) {
        self.calls += 1;
        match outcome {
            Outcome::Ok => {
                self.ok += 1;
                self.admitted.entry(group.to_string()).or_default().0 += 1;
            }
            Outcome::Over => self.over += 1,
            Outcome::Failure => self.failure += 1,
            Outcome::Error => self.errors.push(what.to_string()),
        }
    }

    fn bound(&mut self, group: &str, most: u64) {
        self.admitted.entry(group.to_string()).or_default().1 = most;
    }

    fn admitted(&self, group: &str) -> u64 {
        self.admitted.get(group).map_or(0, |a| a.0)
    }

    pub fn with_fault(mut self, struck: Struck) -> Tally {
        self.struck = struck.what;
        self.broke = struck.broke;
        self
    }

    /// What admitted more than its bound (twice it where a primary restarted empty).
    fn over_admitted(&self, fault: Fault) -> Vec<(String, u64, u64)> {
        let factor = if fault == Fault::RestartEmpty { 2 } else { 1 };
        self.admitted
            .iter()
            .filter(|(_, (got, most))| *got > most * factor)
            .map(|(k, (got, most))| (k.clone(), *got, *most))
            .collect()
    }

    pub fn violations(&self, fault: Fault) -> Vec<String> {
        let mut v: Vec<String> = self
            .over_admitted(fault)
            .into_iter()
            .map(|(k, got, most)| format!("{k} admitted {got} of at most {most}"))
            .collect();
        v.extend(self.broke.clone());
        if !self.errors.is_empty() {
            v.push(format!(
                "{} calls answered with an error, not the failure policy: {:?}",
                self.errors.len(),
                &self.errors[..self.errors.len().min(5)]
            ));
        }
        if self.reservations_lost > 0 && fault != Fault::RestartEmpty {
            v.push(format!(
                "{} reservation records missing with no data lost",
                self.reservations_lost
            ));
        }
        if !self.reservations_pending.is_empty() {
            v.push(format!(
                "reservations neither settled nor lost: {:?}",
                self.reservations_pending
            ));
        }
        v
    }

    pub fn row(&self, p: usize, fault: Fault, s: &Sample) -> String {
        let over: u64 = self
            .over_admitted(Fault::KillPrimary)
            .iter()
            .map(|(_, got, most)| got - most)
            .sum();
        let over = if fault == Fault::RestartEmpty && over > 0 {
            format!("{over} (data lost)")
        } else {
            over.to_string()
        };
        let rss: Vec<String> = s.rss_mib.iter().map(|r| format!("{r:.0}")).collect();
        format!(
            "| {p} | {} ({}) | {} | {} | {} | {} | {} | {over} | {} / {} / {}{} | {} | {:.1} |",
            fault.name(),
            self.struck,
            self.calls,
            self.ok,
            self.over,
            self.failure,
            self.errors.len(),
            self.reservations_made,
            self.reservations_settled,
            self.reservations_lost,
            match self.reservations_ambiguous {
                0 => String::new(),
                n => format!(" ({n} settled by an attempt whose answer was lost)"),
            },
            rss.join(" / "),
            s.redis_mib
        )
    }
}

/// Runs one op through a door chosen by `turn`; its outcome and, for a slot or a
/// reservation, its id.
async fn run_op(callers: &Callers, op: &Op, turn: usize) -> (Outcome, String, String) {
    let us = callers.us[turn % 2].clone();
    match op {
        Op::Decide { d, x } => {
            let ch = if *x && turn % 3 == 2 {
                callers.x.clone()
            } else {
                us
            };
            let domain = if *x { "soakxds" } else { "soak" };
            let r = RateLimitServiceClient::new(ch)
                .should_rate_limit(request(domain, d.clone()))
                .await;
            match r {
                Ok(r) => (outcome_of(&r.into_inner()), String::new(), String::new()),
                Err(s) => (
                    Outcome::Error,
                    String::new(),
                    format!("{:?} {}", s.code(), s.message()),
                ),
            }
        }
        Op::Envoy(tenant) => {
            let url = format!("http://127.0.0.1:{}/", callers.envoy_port);
            let r = crate::support::server::http_client()
                .get(url)
                .header("x-tenant", tenant)
                .timeout(Duration::from_secs(3))
                .send()
                .await;
            match r.map(|r| r.status().as_u16()) {
                Ok(200) => (Outcome::Ok, String::new(), String::new()),
                Ok(429) => (Outcome::Over, String::new(), String::new()),
                Ok(s) => (Outcome::Error, String::new(), format!("Envoy answered {s}")),
                Err(e) => (Outcome::Error, String::new(), format!("Envoy: {e}")),
            }
        }
        Op::Acquire(d) => {
            let r = SlotsClient::new(us)
                .acquire(request("soak", vec![d.clone()]))
                .await;
            match r {
                Ok(r) => {
                    let r = r.into_inner();
                    let o = r.decision.as_ref().map_or(Outcome::Error, outcome_of);
                    (o, r.slot_id, String::new())
                }
                Err(s) => (
                    Outcome::Error,
                    String::new(),
                    format!("{:?} {}", s.code(), s.message()),
                ),
            }
        }
        Op::Reserve(d) => {
            let r = ReservationsClient::new(us)
                .reserve(request("soak", vec![d.clone()]))
                .await;
            match r {
                Ok(r) => {
                    let r = r.into_inner();
                    let o = r.decision.as_ref().map_or(Outcome::Error, outcome_of);
                    (o, r.reservation_id, String::new())
                }
                Err(s) => (
                    Outcome::Error,
                    String::new(),
                    format!("{:?} {}", s.code(), s.message()),
                ),
            }
        }
    }
}

/// `ops` (group, op) paced evenly over `[from_ms, to_ms)`, each on a task of its own; per op,
/// its group, outcome, id and error text.
async fn paced(
    callers: &Arc<Callers>,
    ops: Vec<(String, Op)>,
    from_ms: u64,
    to_ms: u64,
) -> Vec<(String, Outcome, String, String)> {
    let n = ops.len().max(1) as u64;
    let mut tasks = Vec::new();
    for (i, (group, op)) in ops.into_iter().enumerate() {
        sleep_until_ms(from_ms + (to_ms - from_ms) * i as u64 / n).await;
        let callers = callers.clone();
        tasks.push(tokio::spawn(async move {
            let (o, id, err) = run_op(&callers, &op, i).await;
            (group, o, id, err)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("a call's task"));
    }
    out
}

/// A deterministic shuffle, so both halves mix every kind.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// The calls of one half (`half` 0 or 1) of period `p` that need no id.
fn half_ops(p: usize, half: usize) -> Vec<(String, Op)> {
    let mut ops = Vec::new();
    let decide = |group: String, pairs: &[(&str, &str)], cost: u64| {
        (
            group,
            Op::Decide {
                d: vec![desc(pairs, cost)],
                x: false,
            },
        )
    };
    for kind in ["fixed", "sliding", "bucket", "calendar"] {
        for k in 0..3 {
            let v = format!("p{p}k{k}");
            for _ in 0..15 {
                ops.push(decide(format!("{kind}={v}"), &[(kind, &v)], 1));
            }
        }
    }
    for t in 0..6 {
        let v = format!("p{p}t{t}");
        for _ in 0..6 {
            ops.push(decide(format!("tenant={v}"), &[("tenant", &v)], 1));
        }
        for _ in 0..2 {
            ops.push((format!("tenant={v}"), Op::Envoy(v.clone())));
        }
    }
    let (class, n) = if half == 0 {
        ("batch", 60)
    } else {
        ("interactive", 20)
    };
    for _ in 0..n {
        let pairs = [("classes", "pool"), ("priority", class)];
        ops.push(decide(format!("classes:{class}"), &pairs, 1));
    }
    for t in 0..5 {
        let v = format!("p{p}f{}", t + 5 * half);
        for _ in 0..8 {
            ops.push(decide(
                "fair".into(),
                &[("fair", "pool"), ("tenant", &v)],
                1,
            ));
        }
    }
    let spender = format!("p{p}");
    for _ in 0..7 {
        let pairs = [
            ("spend", spender.as_str()),
            ("model", "m1"),
            ("kind", "input"),
        ];
        ops.push(decide("spend".into(), &pairs, 1000));
    }
    let waiter = format!("p{p}");
    for _ in 0..25 {
        ops.push(decide("wait".into(), &[("wait", &waiter)], 1));
    }
    for k in 0..2 {
        let v = format!("p{p}x{k}");
        for _ in 0..15 {
            let d = vec![desc(&[("x", &v)], 1)];
            ops.push((format!("xds={v}"), Op::Decide { d, x: true }));
        }
    }
    ops
}

/// Settles (or releases) each id through the door it was not taken on, retrying a failed
/// call until `until_ms`; counts into `tally` and returns how many each key got back.
async fn give_back(
    callers: &Arc<Callers>,
    taken: &[(String, String)],
    slots: bool,
    until_ms: u64,
    tally: &mut Tally,
) -> BTreeMap<String, u64> {
    let mut settled = BTreeMap::new();
    for (i, (key, id)) in taken.iter().enumerate() {
        let mut failed_before = false;
        loop {
            let ch = callers.us[(i + 1) % 2].clone();
            let (pair, d) = if slots { ("slots", 1) } else { ("rsv", 40) };
            let descriptors = vec![desc(&[(pair, key)], d)];
            let found = if slots {
                SlotsClient::new(ch)
                    .release(SlotRequest {
                        domain: "soak".into(),
                        descriptors,
                        slot_id: id.clone(),
                    })
                    .await
                    .map(|r| r.into_inner().limits > 0)
            } else {
                ReservationsClient::new(ch)
                    .settle(SettleRequest {
                        domain: "soak".into(),
                        descriptors,
                        reservation_id: id.clone(),
                    })
                    .await
                    .map(|r| r.into_inner().limits > 0)
            };
            match found {
                Ok(true) => {
                    *settled.entry(key.clone()).or_insert(0) += 1;
                    if !slots {
                        tally.reservations_settled += 1;
                    }
                    break;
                }
                Ok(false) if !slots && failed_before => {
                    *settled.entry(key.clone()).or_insert(0) += 1;
                    tally.reservations_ambiguous += 1;
                    break;
                }
                Ok(false) if !slots => {
                    tally.reservations_lost += 1;
                    break;
                }
                // A slot already given back by its hold's end: nothing to release.
                Ok(false) => break,
                Err(e) if now_ms() >= until_ms => {
                    if !slots {
                        tally
                            .reservations_pending
                            .push(format!("{key} {id}: {}", e.message()));
                    }
                    break;
                }
                Err(_) => {
                    failed_before = true;
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
            }
        }
    }
    settled
}

/// One period's load on fresh keys (named after `p`), between `start_ms` and `end_ms`.
pub async fn period(
    callers: Arc<Callers>,
    p: usize,
    fault: Fault,
    start_ms: u64,
    end_ms: u64,
) -> Tally {
    let mut tally = Tally::default();
    let mid = start_ms + (end_ms - start_ms) / 2;
    let first = start_ms + 300;

    // First half: everything, the slots taken and the first reservations.
    let mut ops = half_ops(p, 0);
    for k in 0..2 {
        let (s, r) = (format!("p{p}s{k}"), format!("p{p}r{k}"));
        for _ in 0..10 {
            ops.push((format!("slots={s}"), Op::Acquire(desc(&[("slots", &s)], 1))));
        }
        for _ in 0..12 {
            ops.push((format!("rsv1={r}"), Op::Reserve(desc(&[("rsv", &r)], 100))));
        }
    }
    shuffle(&mut ops, p as u64 * 31 + 7);
    let one = paced(&callers, ops, first, mid - 1_500).await;
    let mut slots = Vec::new();
    let mut reserved = Vec::new();
    for (group, o, id, err) in &one {
        tally.count(group, *o, err);
        if *o == Outcome::Ok {
            if let Some(k) = group.strip_prefix("slots=") {
                slots.push((k.to_string(), id.clone()));
            }
            if let Some(k) = group.strip_prefix("rsv1=") {
                reserved.push((k.to_string(), id.clone()));
            }
        }
    }
    tally.reservations_made += reserved.len() as u64;
    // Between the halves: the first reservations settled at 40 of their 100.
    let settled = give_back(&callers, &reserved, false, end_ms, &mut tally).await;

    // Second half: the second reservations, after the settles.
    let mut ops = half_ops(p, 1);
    for k in 0..2 {
        let r = format!("p{p}r{k}");
        for _ in 0..12 {
            ops.push((format!("rsv2={r}"), Op::Reserve(desc(&[("rsv", &r)], 100))));
        }
    }
    shuffle(&mut ops, p as u64 * 17 + 3);
    let from = now_ms().max(mid);
    let two = paced(&callers, ops, from, end_ms - 1_000).await;
    let mut reserved2 = Vec::new();
    for (group, o, id, err) in &two {
        tally.count(group, *o, err);
        if *o == Outcome::Ok {
            if let Some(k) = group.strip_prefix("rsv2=") {
                reserved2.push((k.to_string(), id.clone()));
            }
        }
    }
    tally.reservations_made += reserved2.len() as u64;
    give_back(&callers, &reserved2, false, end_ms + 15_000, &mut tally).await;
    give_back(&callers, &slots, true, end_ms + 15_000, &mut tally).await;

    bounds(&mut tally, p, &settled, (first, end_ms), fault);
    tally
}

/// What each key of period `p` may admit (`fault`'s period: a primary restarted empty
/// forgets the first reservations, so the second round may fill the limit again).
fn bounds(
    tally: &mut Tally,
    p: usize,
    settled: &BTreeMap<String, u64>,
    span: (u64, u64),
    fault: Fault,
) {
    for kind in ["fixed", "sliding", "calendar"] {
        for k in 0..3 {
            tally.bound(&format!("{kind}=p{p}k{k}"), 20);
        }
    }
    // A bucket of 20 refilling 20 a minute; `max_wait`'s of 10 refilling 10 a second: what
    // they held at first plus what refilled while the period ran.
    let span_s = (span.1 - span.0) as f64 / 1000.0;
    for k in 0..3 {
        tally.bound(
            &format!("bucket=p{p}k{k}"),
            20 + (20.0 * span_s / 60.0).ceil() as u64,
        );
    }
    tally.bound("wait", 10 + (10.0 * span_s).ceil() as u64);
    let mut pool = 0;
    for t in 0..6 {
        let g = format!("tenant=p{p}t{t}");
        pool += tally.admitted(&g);
        tally.bound(&g, 10);
    }
    tally.admitted.insert("tenants-pool".into(), (pool, 40));
    let classes = tally.admitted("classes:batch") + tally.admitted("classes:interactive");
    tally.bound("classes:batch", 40);
    tally.bound("classes:interactive", 50);
    tally.admitted.insert("class-pool".into(), (classes, 50));
    tally.bound("fair", 60);
    tally.bound("spend", 10);
    for k in 0..2 {
        tally.bound(&format!("xds=p{p}x{k}"), 20);
        tally.bound(&format!("slots=p{p}s{k}"), 6);
        let r = format!("p{p}r{k}");
        let made = tally.admitted(&format!("rsv1={r}"));
        tally.bound(&format!("rsv1={r}"), 10);
        let back = settled.get(&r).copied().unwrap_or(0);
        // The second round fits what the first left: 100 for each unsettled, 40 for each
        // settled.
        let left = 1000u64.saturating_sub(100 * (made - back.min(made)) + 40 * back);
        let left = if fault == Fault::RestartEmpty {
            1000
        } else {
            left
        };
        tally.bound(&format!("rsv2={r}"), left / 100);
    }
}

// ------------------------------------------------------------------------------ global load

/// The global limit's load: us at 150/s through A and B, eu at 100/s through C.
pub struct GlobalLoad {
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<(u64, bool, Outcome)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// 300 per 2 s window across both regions; answers in flight across a boundary are
/// counted by their send time, so a window may show a few of its neighbour's.
const GLOBAL_LIMIT: u64 = 300;
const GLOBAL_SLACK: u64 = 10;
const GLOBAL_WINDOW_MS: u64 = 2_000;

impl GlobalLoad {
    pub fn start(callers: Arc<Callers>) -> GlobalLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let turn = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (us, per_s) in [(true, 150u64), (false, 100)] {
            let (stop, sent, callers, turn) =
                (stop.clone(), sent.clone(), callers.clone(), turn.clone());
            tasks.push(tokio::spawn(async move {
                let start = now_ms();
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    sleep_until_ms(start + i * 1000 / per_s).await;
                    let ch = if us {
                        callers.us[turn.fetch_add(1, Ordering::Relaxed) % 2].clone()
                    } else {
                        callers.eu.clone()
                    };
                    let sent = sent.clone();
                    tokio::spawn(async move {
                        let at = now_ms();
                        let d = vec![desc(&[("provider", "openai")], 1)];
                        let r = RateLimitServiceClient::new(ch)
                            .should_rate_limit(request("soakglobal", d))
                            .await;
                        let o = match r {
                            Ok(r) => outcome_of(&r.into_inner()),
                            Err(_) => Outcome::Error,
                        };
                        sent.lock().expect("lock").push((at, us, o));
                    });
                }
            }));
        }
        GlobalLoad { stop, sent, tasks }
    }

    /// Stops the load; what it saw, with the windows a loss may excuse.
    pub async fn finish(self, losses: &[(u64, u64)]) -> GlobalResult {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = t.await;
        }
        tokio::time::sleep(CALL_TIMEOUT + Duration::from_millis(500)).await;
        let sent = self.sent.lock().expect("lock").clone();
        let mut windows: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut errors = 0;
        for (at, us, o) in &sent {
            match o {
                Outcome::Ok => {
                    let w = windows.entry(at / GLOBAL_WINDOW_MS).or_default();
                    if *us {
                        w.0 += 1;
                    } else {
                        w.1 += 1;
                    }
                }
                Outcome::Error => errors += 1,
                _ => {}
            }
        }
        let excused = |w: u64| {
            losses
                .iter()
                .any(|(a, b)| w * GLOBAL_WINDOW_MS < *b && (w + 1) * GLOBAL_WINDOW_MS > *a)
        };
        let over: Vec<(u64, u64, u64)> = windows
            .iter()
            .filter(|(w, (u, e))| u + e > GLOBAL_LIMIT + GLOBAL_SLACK && !excused(**w))
            .map(|(w, (u, e))| (*w, *u, *e))
            .collect();
        let most = windows.values().map(|(u, e)| u + e).max().unwrap_or(0);
        GlobalResult {
            calls: sent.len() as u64,
            windows: windows.len() as u64,
            most,
            over,
            errors,
        }
    }
}

pub struct GlobalResult {
    calls: u64,
    windows: u64,
    /// The most admitted in one window.
    most: u64,
    /// Windows over the limit that no loss excuses: (window, us, eu).
    over: Vec<(u64, u64, u64)>,
    errors: u64,
}

impl GlobalResult {
    pub fn summary(&self) -> String {
        format!(
            "global limit ({GLOBAL_LIMIT} per 2 s across eu and us): {} calls over {} windows, \
             at most {} admitted in a window, {} windows over the limit (+{GLOBAL_SLACK} for \
             calls across a boundary) outside a loss, {} errors",
            self.calls,
            self.windows,
            self.most,
            self.over.len(),
            self.errors
        )
    }

    pub fn violations(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .over
            .iter()
            .map(|(w, u, e)| {
                format!("global window {w}: us {u} + eu {e} admitted of {GLOBAL_LIMIT}")
            })
            .collect();
        if self.errors > 0 {
            v.push(format!(
                "{} global calls answered with an error",
                self.errors
            ));
        }
        v
    }
}
