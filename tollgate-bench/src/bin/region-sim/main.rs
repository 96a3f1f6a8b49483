//! One limit across regions, simulated (docs/multi-region.md): the authority and region code of
//! `tollgate::algorithm::global` driven by injected time (1 ms steps) and an injected network
//! (each region's round trip to home, a partition, a failover with replication lag), beside
//! three baselines: a static split, independent regions, one shared Redis.
//!
//! `cargo run --release -p tollgate-bench --bin region-sim [-- FILTER]` prints one markdown row
//! per case (only the cases whose name contains FILTER).

use std::collections::VecDeque;

mod cases;

use tollgate::algorithm::global::authority::Authority;
use tollgate::algorithm::global::region::{Admit, Region};
use tollgate::algorithm::global::terms::{Ask, GlobalLimit, Grant, Kind, OnPartition};

const MS: u64 = 1_000;
const S: u64 = 1_000_000;

#[derive(Clone, Copy, Debug)]
enum Demand {
    Uniform,
    /// 90% of the demand in region 0, the rest spread.
    Skewed,
    /// All of the demand moves from region 0 to the last region in one second, mid-window.
    Moving,
    /// Region 1's demand jumps 10× for a fifth of the run, from a third in.
    Flash,
    /// 10× the limit, spread over all regions.
    Attacker,
}

#[derive(Clone, Copy, Debug)]
enum Failure {
    None,
    /// The last region cut off from home for 30 s (from a third of the run).
    Partition,
    /// Home fails over at a third of the run, its replica `lag` ms behind; with `wait`, grants
    /// were made durable before they were spent.
    Failover {
        lag_ms: u64,
        wait: bool,
    },
    /// Region 1's refill task dies and its lock passes on after 3 periods.
    InstanceDeath,
    /// Regions' clocks off by up to ±50 ms.
    Skew,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Strategy {
    Leases,
    StaticSplit,
    Independent,
    SharedRedis,
}

/// What a request costs.
#[derive(Clone, Copy, Debug)]
enum Cost {
    /// One unit.
    Unit,
    /// Money: 1 to `max` units (µUSD), at random.
    Money { max: u64 },
    /// A reservation of `estimate` units, settled `after_ms` later at half or one and a half
    /// of it, in turn (the excess lands past the lease, and the region reports it to home).
    Reserve { estimate: u64, after_ms: u64 },
}

impl Cost {
    fn mean(self) -> f64 {
        match self {
            Cost::Unit => 1.0,
            Cost::Money { max } => (max as f64 + 1.0) / 2.0,
            Cost::Reserve { estimate, .. } => estimate as f64,
        }
    }
}

struct Case {
    name: String,
    rtts_ms: Vec<u64>,
    kind: Kind,
    on_partition: OnPartition,
    demand: Demand,
    failure: Failure,
    strategy: Strategy,
    cost: Cost,
}

/// The demand of region `r` at `t` of a run of `run` µs, per second.
fn demand(c: &Case, total: f64, r: usize, t: u64, run: u64, at: u64) -> f64 {
    let n = c.rtts_ms.len();
    let even = total / n as f64;
    match c.demand {
        Demand::Uniform => even,
        Demand::Skewed => {
            if r == 0 {
                total * 0.9
            } else {
                total * 0.1 / (n - 1) as f64
            }
        }
        Demand::Moving => {
            let from = at;
            let moved = (t.saturating_sub(from) as f64 / S as f64).min(1.0);
            if r == 0 {
                total * (1.0 - moved)
            } else if r == n - 1 {
                total * moved
            } else {
                0.0
            }
        }
        Demand::Flash => {
            if r == 1 && t >= at && t < at + run / 5 {
                even * 10.0
            } else {
                even
            }
        }
        Demand::Attacker => total / 1.2 * 10.0 / n as f64,
    }
}

#[derive(Default)]
struct Tally {
    requests: u64,
    admitted: u64,
    wrong_denials: u64,
    authority_calls: u64,
    /// Per full window: admitted ÷ limit; stranded ÷ limit.
    window_ratio: Vec<f64>,
    stranded: Vec<f64>,
    /// Admitted per ms (for interval bounds).
    per_ms: Vec<u32>,
    /// A bucket: the most admitted beyond the exact global bucket, ÷ burst.
    excess: f64,
}

fn settings(c: &Case) -> GlobalLimit {
    let period_us = 50 * MS;
    let max_rtt = c.rtts_ms.iter().max().copied().unwrap_or(1) * MS;
    GlobalLimit {
        kind: c.kind,
        on_partition: c.on_partition,
        period_us,
        // The answer a region confirms is a cycle (a round trip and a period) old when its
        // next ask arrives, and that ask a cycle later: two of them, and a period to spare.
        silent_after_us: 3 * period_us + 2 * max_rtt,
        lifetime_us: 2 * max_rtt + period_us,
        caution_us: max_rtt + period_us,
    }
}

/// (limit per window or burst, window or burst/rate in µs)
fn size(kind: Kind) -> (u64, u64) {
    match kind {
        Kind::Window {
            limit, window_us, ..
        } => (limit, window_us),
        Kind::Bucket { rate, burst } => (burst, (burst as f64 / rate * S as f64) as u64),
    }
}

/// When the case's event (a failure, demand moving, a flash crowd) begins: a third into the
/// run, moved to the middle of a window.
fn event_at(run: u64, window_us: u64) -> u64 {
    let third = run / 3;
    if window_us < run {
        third - third % window_us + window_us / 2
    } else {
        third
    }
}

fn run(c: &Case) -> (Tally, u64) {
    let (limit, window_us) = size(c.kind);
    let windows = if window_us >= 3600 * S { 2 } else { 3 };
    // Long enough for the failure (30 s, from the event) and, for a bucket, for intervals of
    // 10 s; whole windows.
    let least = match (c.kind, c.failure) {
        (_, Failure::None) if matches!(c.kind, Kind::Bucket { .. }) => 30 * S,
        (_, Failure::None) => 0,
        _ => 90 * S,
    };
    let run = (windows * window_us).max(least.div_ceil(window_us) * window_us);
    let n = c.rtts_ms.len();
    let total = 1.2 * limit as f64 * S as f64 / window_us as f64;
    let s = settings(c);
    let at = event_at(run, window_us);
    // Each region's clock: an offset of up to ±50 ms and a rate off by up to ±500 ppm.
    let clock = |r: usize, now: u64| -> u64 {
        match c.failure {
            Failure::Skew => {
                let ppm = [500i64, -500, 250, -250, 0][r % 5];
                let offset_ms = [50i64, -50, 25, -25, 0][r % 5];
                let now = now as i64;
                // 100 ms on every clock keeps them positive.
                (now + (100 + offset_ms) * MS as i64 + now * ppm / 1_000_000) as u64
            }
            _ => now,
        }
    };
    let mut authority = Authority::new(s, n, 0);
    let mut regions: Vec<Region> = (0..n)
        .map(|r| Region::new(r, s, c.rtts_ms[r] * MS, clock(r, 0)))
        .collect();
    let mut net: Vec<InFlight> = Vec::new();
    let mut history: VecDeque<Authority> = VecDeque::new();
    let mut carry = vec![0.0f64; n];
    // Settles due: when, the region, the window reserved in, and the units more (or fewer).
    let mut settles: VecDeque<(u64, usize, u64, i64)> = VecDeque::new();
    let mut reserved = 0u64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut t = Tally {
        per_ms: Vec::with_capacity((run / MS) as usize),
        ..Tally::default()
    };
    // The baselines' counters: per region (a static split, independent regions), or at home.
    let split = matches!(c.strategy, Strategy::StaticSplit);
    let (cap, add) = match c.kind {
        Kind::Window { .. } => (0.0, 0.0),
        Kind::Bucket { rate, burst } if split => (burst as f64 / n as f64, rate / n as f64 / 1e3),
        Kind::Bucket { rate, burst } => (burst as f64, rate / 1e3),
    };
    let mut local = vec![0u64; n];
    let mut tokens = vec![cap; n];
    let mut home_tokens = limit as f64;
    // The exact global bucket, charged with what was admitted (its low point is any excess),
    // and an ideal one deciding the same requests itself (what the limit would have admitted).
    let mut reference = limit as f64;
    let mut lowest = limit as f64;
    let mut ideal = limit as f64;
    let mut ideal_admitted = 0u64;
    let mut window_admitted = 0u64;
    let mut lapsed_before = 0u64;
    let mut window = 0u64;
    let cut_to = at + 30 * S;
    let mut failed_over = false;
    let dead_for = 4 * s.period_us;
    while t.per_ms.len() < (run / MS) as usize {
        let now = t.per_ms.len() as u64 * MS;
        let cut = |r: usize| {
            matches!(c.failure, Failure::Partition) && r == n - 1 && now >= at && now < cut_to
        };
        let dead = |r: usize| {
            matches!(c.failure, Failure::InstanceDeath)
                && r == 1
                && now >= at
                && now < at + dead_for
        };
        let w = now / window_us;
        if w != window {
            if matches!(c.kind, Kind::Window { .. }) {
                t.window_ratio.push(window_admitted as f64 / limit as f64);
                if c.strategy == Strategy::Leases {
                    let lapsed: u64 = regions
                        .iter_mut()
                        .map(|r| r.lapsed(clock(r.index, now)))
                        .sum();
                    t.stranded
                        .push((lapsed - lapsed_before) as f64 / limit as f64);
                    lapsed_before = lapsed;
                }
            }
            window = w;
            window_admitted = 0;
            local.iter_mut().for_each(|l| *l = 0);
        }
        // The network: what is due now, in order.
        net.sort_by_key(|m| std::cmp::Reverse(m.at));
        while net.last().is_some_and(|m| m.at <= now) {
            let m = net.pop().unwrap();
            if cut(m.region) || dead(m.region) {
                continue;
            }
            match m.msg {
                Msg::Ask(ask) => {
                    t.authority_calls += 1;
                    let grant = authority.grant(&ask, now);
                    // With WAIT, the answer leaves once a replica has the grant.
                    let replicated = match c.failure {
                        Failure::Failover { lag_ms, wait: true } => lag_ms * MS,
                        _ => 0,
                    };
                    net.push(InFlight {
                        at: now + replicated + c.rtts_ms[m.region] * MS / 2,
                        msg: Msg::Answer(grant),
                        ..m
                    });
                }
                Msg::Answer(grant) => {
                    regions[m.region].answered(&grant, m.sent, clock(m.region, now))
                }
            }
        }
        if let (Failure::Failover { lag_ms, wait }, Strategy::Leases) = (c.failure, c.strategy) {
            history.push_back(authority.clone());
            if history.len() as u64 > lag_ms + 1 {
                history.pop_front();
            }
            if !failed_over && now >= at {
                failed_over = true;
                if wait {
                    // Every answer that left was replicated; those waiting on WAIT fail.
                    net.retain(|m| matches!(m.msg, Msg::Ask(_)));
                } else {
                    // The replica is `lag` behind: the grants since are forgotten.
                    authority = history.front().cloned().unwrap_or(authority);
                }
                authority.take_over(now);
            }
        }
        if c.strategy == Strategy::Leases {
            for (r, region) in regions.iter_mut().enumerate() {
                if dead(r) {
                    // The refill task died with its instance; another takes the lock after it.
                    region.refill_lost();
                    continue;
                }
                if let Some(ask) = region.tick(clock(r, now)) {
                    net.push(InFlight {
                        at: now + c.rtts_ms[r] * MS / 2,
                        region: r,
                        sent: clock(r, now),
                        msg: Msg::Ask(ask),
                    });
                }
            }
        }
        if let Kind::Bucket { rate, burst } = c.kind {
            let refill = |x: f64| (x + rate / 1e3).min(burst as f64);
            (home_tokens, reference, ideal) =
                (refill(home_tokens), refill(reference), refill(ideal));
            tokens.iter_mut().for_each(|x| *x = (*x + add).min(cap));
        }
        // Settles: what landed past a reservation (or came back), in the window it lands in.
        while settles.front().is_some_and(|s| s.0 <= now) {
            let (_, r, w, extra) = settles.pop_front().unwrap();
            regions[r].settled(w, extra, clock(r, now));
            if extra > 0 || w == now / window_us {
                window_admitted = window_admitted.saturating_add_signed(extra);
                t.admitted = t.admitted.saturating_add_signed(extra);
            }
        }
        // Requests.
        let mut this_ms = 0u32;
        for r in 0..n {
            carry[r] += demand(c, total, r, now, run, at) / 1000.0 / c.cost.mean();
            while carry[r] >= 1.0 {
                carry[r] -= 1.0;
                let cost = match c.cost {
                    Cost::Unit => 1,
                    Cost::Money { max } => 1 + rand() % max,
                    Cost::Reserve { estimate, .. } => estimate,
                };
                t.requests += 1;
                if c.strategy == Strategy::SharedRedis {
                    t.authority_calls += 1;
                }
                let ideal_ok = match c.kind {
                    Kind::Window { .. } => false,
                    Kind::Bucket { .. } => ideal >= 1.0,
                };
                if ideal_ok {
                    ideal -= 1.0;
                    ideal_admitted += 1;
                }
                let ok = match c.strategy {
                    Strategy::Leases => regions[r].admit(cost, clock(r, now)) != Admit::Refused,
                    Strategy::StaticSplit | Strategy::Independent => match c.kind {
                        Kind::Window { .. } => {
                            let cap = if split { limit / n as u64 } else { limit };
                            let ok = local[r] < cap;
                            local[r] += ok as u64;
                            ok
                        }
                        Kind::Bucket { .. } => {
                            let ok = tokens[r] >= 1.0;
                            tokens[r] -= ok as u64 as f64;
                            ok
                        }
                    },
                    // Every decision at home; a region cut off fails closed.
                    Strategy::SharedRedis => {
                        let ok = !cut(r)
                            && match c.kind {
                                Kind::Window { .. } => window_admitted < limit,
                                Kind::Bucket { .. } => home_tokens >= 1.0,
                            };
                        home_tokens -= ok as u64 as f64;
                        ok
                    }
                };
                if let (true, Cost::Reserve { estimate, after_ms }) = (ok, c.cost) {
                    reserved += 1;
                    let half = (estimate / 2) as i64;
                    let extra = if reserved.is_multiple_of(2) {
                        half
                    } else {
                        -half
                    };
                    let w = regions[r].window_index();
                    settles.push_back((now + after_ms * MS, r, w, extra));
                }
                if ok {
                    t.admitted += cost;
                    window_admitted += cost;
                    this_ms += cost as u32;
                    reference -= 1.0;
                    lowest = lowest.min(reference);
                } else if let Kind::Window { .. } = c.kind {
                    if limit.saturating_sub(window_admitted) as f64 >= 0.05 * limit as f64 {
                        t.wrong_denials += 1;
                    }
                }
            }
        }
        t.per_ms.push(this_ms);
    }
    let end = run;
    if matches!(c.kind, Kind::Window { .. }) {
        t.window_ratio.push(window_admitted as f64 / limit as f64);
        if c.strategy == Strategy::Leases {
            let lapsed: u64 = regions
                .iter_mut()
                .map(|r| r.lapsed(clock(r.index, end) + 1))
                .sum();
            t.stranded
                .push((lapsed - lapsed_before) as f64 / limit as f64);
        }
    } else {
        // A bucket: what the ideal bucket admitted beyond these, of the requests; and any
        // admission beyond the exact bucket, as a fraction of its burst.
        t.wrong_denials = ideal_admitted.saturating_sub(t.admitted);
        t.excess = (-lowest).max(0.0) / limit as f64;
    }
    (t, run)
}

enum Msg {
    Ask(Ask),
    Answer(Grant),
}

/// A message between a region and home: when it arrives, and when the ask was sent (on the
/// region's clock).
struct InFlight {
    at: u64,
    region: usize,
    sent: u64,
    msg: Msg,
}

/// The largest admitted over any interval of `len_ms`, against the bucket's bound.
fn interval_ratio(per_ms: &[u32], len_ms: usize, rate: f64, burst: u64) -> f64 {
    let mut sum: u64 = per_ms.iter().take(len_ms).map(|&x| x as u64).sum();
    let mut best = sum;
    for i in len_ms..per_ms.len() {
        sum += per_ms[i] as u64;
        sum -= per_ms[i - len_ms] as u64;
        best = best.max(sum);
    }
    best as f64 / (burst as f64 + rate * len_ms as f64 / 1000.0)
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let cases = cases::all();
    println!("| case | max admitted ÷ limit | utilisation | stranded | wrong denials | authority calls/s | added latency |");
    println!("|---|---|---|---|---|---|---|");
    for c in cases.iter().filter(|c| c.name.contains(&filter)) {
        let (mut t, run) = run(c);
        let (max_ratio, util) = match c.kind {
            Kind::Window { .. } => {
                let full: Vec<f64> = t.window_ratio.iter().skip(1).copied().collect();
                // Stranded, on the same windows.
                if !t.stranded.is_empty() {
                    t.stranded.remove(0);
                }
                let max = t.window_ratio.iter().copied().fold(0.0, f64::max);
                let util = if full.is_empty() {
                    0.0
                } else {
                    full.iter().sum::<f64>() / full.len() as f64
                };
                (max, util.min(max))
            }
            Kind::Bucket { rate, burst } => {
                // Beyond the exact bucket at any moment (1 + excess ÷ burst), and the busiest
                // interval of 0.1, 1 or 10 s against burst + rate × interval.
                let intervals = [100usize, 1_000, 10_000]
                    .iter()
                    .map(|&l| interval_ratio(&t.per_ms, l, rate, burst))
                    .fold(0.0, f64::max);
                let max = (1.0 + t.excess).max(intervals.min(1.0));
                // Of what the bucket lets through in the run: its burst and its rate.
                let util = t.admitted as f64 / (burst as f64 + rate * run as f64 / S as f64);
                (max, util)
            }
        };
        let stranded = if t.stranded.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:.2}%",
                100.0 * t.stranded.iter().sum::<f64>() / t.stranded.len() as f64
            )
        };
        let latency = match c.strategy {
            Strategy::SharedRedis => {
                format!("+{} ms (remote regions)", c.rtts_ms.iter().max().unwrap())
            }
            _ => "0".into(),
        };
        println!(
            "| {} | {:.3} | {:.1}% | {} | {:.2}% | {:.1} | {} |",
            c.name,
            max_ratio,
            100.0 * util,
            stranded,
            100.0 * t.wrong_denials as f64 / t.requests.max(1) as f64,
            t.authority_calls as f64 / (run as f64 / S as f64),
            latency
        );
    }
}
