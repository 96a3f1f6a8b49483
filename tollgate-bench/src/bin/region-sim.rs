//! One limit across regions, simulated (docs/multi-region.md): the authority and region code of
//! `tollgate::algorithm::global` driven by injected time (1 ms steps) and an injected network
//! (each region's round trip to home, a partition, a failover with replication lag), beside
//! three baselines: a static split, independent regions, one shared Redis.
//!
//! `cargo run --release -p tollgate-bench --bin region-sim [-- FILTER]` prints one markdown row
//! per case (only the cases whose name contains FILTER).

use std::collections::VecDeque;

use tollgate::algorithm::global::authority::Authority;
use tollgate::algorithm::global::region::{Admit, Region};
use tollgate::algorithm::global::terms::{Ask, Grant, Kind, OnPartition, Settings};

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

struct Case {
    name: String,
    rtts_ms: Vec<u64>,
    kind: Kind,
    on_partition: OnPartition,
    demand: Demand,
    failure: Failure,
    strategy: Strategy,
}

/// The demand of region `r` at `t` of a run of `run` µs, per second.
fn demand(c: &Case, total: f64, r: usize, t: u64, run: u64) -> f64 {
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
            let from = run / 3;
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
            if r == 1 && t >= run / 3 && t < run / 3 + run / 5 {
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
}

fn settings(c: &Case) -> Settings {
    let period_us = 50 * MS;
    let max_rtt = c.rtts_ms.iter().max().copied().unwrap_or(1) * MS;
    Settings {
        kind: c.kind,
        on_partition: c.on_partition,
        period_us,
        silent_after_us: 3 * period_us + max_rtt,
        lifetime_us: 2 * max_rtt + period_us,
        caution_us: max_rtt + period_us,
    }
}

/// (limit per window or burst, window or burst/rate in µs)
fn size(kind: Kind) -> (u64, u64) {
    match kind {
        Kind::Window { limit, window_us } => (limit, window_us),
        Kind::Bucket { rate, burst } => (burst, (burst as f64 / rate * S as f64) as u64),
    }
}

fn run(c: &Case) -> (Tally, u64) {
    let (limit, window_us) = size(c.kind);
    let windows = if window_us >= 3600 * S { 2 } else { 3 };
    // Long enough for the failure (a third in, 30 s long) and, for a bucket, for intervals of
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
    let skew: Vec<u64> = (0..n)
        .map(|r| match c.failure {
            Failure::Skew => (r as u64 * 25 * MS) % (100 * MS),
            _ => 0,
        })
        .collect();
    let mut authority = Authority::new(s, n, 0);
    let mut regions: Vec<Region> = (0..n)
        .map(|r| Region::new(r, s, c.rtts_ms[r] * MS, skew[r]))
        .collect();
    let mut net: Vec<InFlight> = Vec::new();
    let mut history: VecDeque<Authority> = VecDeque::new();
    let mut carry = vec![0.0f64; n];
    let mut t = Tally {
        per_ms: Vec::with_capacity((run / MS) as usize),
        ..Tally::default()
    };
    // Baselines' own counters: per region (static split, independent) or one (shared).
    let mut local = vec![0u64; n];
    let mut tokens = vec![0f64; n];
    let mut window_admitted = 0u64;
    let mut lapsed_before = 0u64;
    let mut window = 0u64;
    let (cut_from, cut_to) = (run / 3, run / 3 + 30 * S);
    let failover_at = run / 3;
    let mut failed_over = false;
    let mut dead_until = 0u64;
    let mut bucket_tokens = limit as f64;
    let mut now = 0u64;
    while now < run {
        let cut = |r: usize| {
            matches!(c.failure, Failure::Partition) && r == n - 1 && now >= cut_from && now < cut_to
        };
        let w = now / window_us;
        if w != window {
            if matches!(c.kind, Kind::Window { .. }) {
                t.window_ratio.push(window_admitted as f64 / limit as f64);
                if c.strategy == Strategy::Leases {
                    let lapsed: u64 = regions
                        .iter_mut()
                        .map(|r| r.lapsed(now + skew[r.index]))
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
            if cut(m.region) {
                continue;
            }
            match m.msg {
                Msg::Ask(ask) => {
                    t.authority_calls += 1;
                    let grant = authority.grant(&ask, now);
                    net.push(InFlight {
                        at: now + c.rtts_ms[m.region] * MS / 2,
                        msg: Msg::Answer(grant),
                        ..m
                    });
                }
                Msg::Answer(grant) => {
                    regions[m.region].answered(&grant, m.sent, now + skew[m.region])
                }
            }
        }
        if let Failure::Failover { lag_ms, wait } = c.failure {
            if c.strategy == Strategy::Leases {
                history.push_back(authority.clone());
                if history.len() as u64 > lag_ms.max(1) + 1 {
                    history.pop_front();
                }
                if !failed_over && now >= failover_at {
                    failed_over = true;
                    if !wait {
                        authority = history.front().cloned().unwrap_or(authority);
                    }
                    authority.take_over(now);
                }
            }
        }
        if c.strategy == Strategy::Leases {
            for r in 0..n {
                let dead = matches!(c.failure, Failure::InstanceDeath) && r == 1;
                if dead && now >= run / 3 && dead_until == 0 {
                    dead_until = now + 3 * s.period_us;
                }
                if dead && now >= run / 3 && now < dead_until {
                    continue;
                }
                if let Some(ask) = regions[r].tick(now + skew[r]) {
                    net.push(InFlight {
                        at: now + c.rtts_ms[r] * MS / 2,
                        region: r,
                        sent: now + skew[r],
                        msg: Msg::Ask(ask),
                    });
                }
            }
        }
        if let Kind::Bucket { rate, burst } = c.kind {
            bucket_tokens = (bucket_tokens + rate / 1000.0).min(burst as f64);
        }
        // Requests.
        let mut this_ms = 0u32;
        for r in 0..n {
            carry[r] += demand(c, total, r, now, run) / 1000.0;
            while carry[r] >= 1.0 {
                carry[r] -= 1.0;
                t.requests += 1;
                let ok = match c.strategy {
                    Strategy::Leases => regions[r].admit(1, now + skew[r]) != Admit::Refused,
                    Strategy::StaticSplit | Strategy::Independent => {
                        let cap = if c.strategy == Strategy::StaticSplit {
                            limit / n as u64
                        } else {
                            limit
                        };
                        match c.kind {
                            Kind::Window { .. } => {
                                let ok = local[r] < cap;
                                local[r] += ok as u64;
                                ok
                            }
                            Kind::Bucket { .. } => {
                                let ok = tokens[r] >= 1.0;
                                if ok {
                                    tokens[r] -= 1.0;
                                }
                                ok
                            }
                        }
                    }
                    Strategy::SharedRedis => {
                        // Every decision at home; a region cut off fails closed.
                        !cut(r)
                            && match c.kind {
                                Kind::Window { .. } => window_admitted < limit,
                                Kind::Bucket { .. } => bucket_tokens >= 1.0,
                            }
                    }
                };
                if ok {
                    t.admitted += 1;
                    window_admitted += 1;
                    this_ms += 1;
                    if c.strategy == Strategy::SharedRedis {
                        bucket_tokens -= 1.0;
                    }
                } else {
                    let left = match c.kind {
                        Kind::Window { .. } => limit.saturating_sub(window_admitted),
                        Kind::Bucket { .. } => bucket_tokens.max(0.0) as u64,
                    };
                    if left as f64 >= 0.05 * limit as f64 {
                        t.wrong_denials += 1;
                        if std::env::var_os("SIM_DEBUG").is_some() {
                            eprintln!("wrong {} r{r} t={}ms left={left}", c.name, now / MS);
                        }
                    }
                }
            }
        }
        if let Kind::Bucket { rate, burst } = c.kind {
            let n = n as f64;
            let (cap, add) = match c.strategy {
                Strategy::StaticSplit => (burst as f64 / n, rate / n / 1000.0),
                _ => (burst as f64, rate / 1000.0),
            };
            tokens.iter_mut().for_each(|x| *x = (*x + add).min(cap));
            if c.strategy == Strategy::Leases {
                // The global bucket's own view, for wrong denials: what is not yet admitted.
                bucket_tokens -= this_ms as f64;
            }
        }
        t.per_ms.push(this_ms);
        now += MS;
    }
    if matches!(c.kind, Kind::Window { .. }) {
        t.window_ratio.push(window_admitted as f64 / limit as f64);
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
    let five = vec![1, 20, 80, 150, 200];
    let three = vec![1, 60, 200];
    let mut cases = Vec::new();
    let windows = [(S, "1 s"), (60 * S, "60 s"), (3600 * S, "1 h")];
    let limits = [10u64, 1_000, 100_000];
    let demands = [
        Demand::Uniform,
        Demand::Skewed,
        Demand::Moving,
        Demand::Flash,
        Demand::Attacker,
    ];
    let safe = OnPartition::SafeShare(0.05);
    for &(window_us, wname) in &windows {
        for &limit in &limits {
            for &d in &demands {
                for strategy in [
                    Strategy::Leases,
                    Strategy::StaticSplit,
                    Strategy::Independent,
                    Strategy::SharedRedis,
                ] {
                    if strategy != Strategy::Leases
                        && !matches!(d, Demand::Uniform | Demand::Skewed)
                    {
                        continue;
                    }
                    cases.push(Case {
                        name: format!("window {limit}/{wname}, 5 regions, {d:?}, {strategy:?}"),
                        rtts_ms: five.clone(),
                        kind: Kind::Window { limit, window_us },
                        on_partition: safe,
                        demand: d,
                        failure: Failure::None,
                        strategy,
                    });
                }
            }
        }
    }
    let failures = [
        Failure::Partition,
        Failure::Failover {
            lag_ms: 0,
            wait: true,
        },
        Failure::Failover {
            lag_ms: 500,
            wait: true,
        },
        Failure::Failover {
            lag_ms: 100,
            wait: false,
        },
        Failure::Failover {
            lag_ms: 500,
            wait: false,
        },
        Failure::InstanceDeath,
        Failure::Skew,
    ];
    for f in failures {
        for (kind, kname) in [
            (
                Kind::Window {
                    limit: 1_000,
                    window_us: 60 * S,
                },
                "window 1000/60 s",
            ),
            (
                Kind::Bucket {
                    rate: 1_000.0,
                    burst: 1_000,
                },
                "bucket 1000/s burst 1000",
            ),
        ] {
            for on_partition in [safe, OnPartition::Refuse] {
                if on_partition == OnPartition::Refuse && !matches!(f, Failure::Partition) {
                    continue;
                }
                for strategy in [Strategy::Leases, Strategy::SharedRedis] {
                    if strategy == Strategy::SharedRedis && !matches!(f, Failure::Partition) {
                        continue;
                    }
                    cases.push(Case {
                        name: format!("{kname}, 3 regions, {f:?}, {on_partition:?}, {strategy:?}"),
                        rtts_ms: three.clone(),
                        kind,
                        on_partition,
                        demand: Demand::Uniform,
                        failure: f,
                        strategy,
                    });
                }
            }
        }
    }
    for &d in &demands {
        for strategy in [
            Strategy::Leases,
            Strategy::StaticSplit,
            Strategy::Independent,
        ] {
            cases.push(Case {
                name: format!("bucket 1000/s burst 1000, 5 regions, {d:?}, {strategy:?}"),
                rtts_ms: five.clone(),
                kind: Kind::Bucket {
                    rate: 1_000.0,
                    burst: 1_000,
                },
                on_partition: safe,
                demand: d,
                failure: Failure::None,
                strategy,
            });
        }
    }
    println!("| case | max admitted ÷ limit | utilisation | stranded | wrong denials | authority calls/s | added latency |");
    println!("|---|---|---|---|---|---|---|");
    for c in cases.iter().filter(|c| c.name.contains(&filter)) {
        let (t, run) = run(c);
        let (max_ratio, util) = match c.kind {
            Kind::Window { .. } => {
                let full: Vec<f64> = t.window_ratio.iter().skip(1).copied().collect();
                let max = t.window_ratio.iter().copied().fold(0.0, f64::max);
                let util = if full.is_empty() {
                    0.0
                } else {
                    full.iter().sum::<f64>() / full.len() as f64
                };
                (max, util.min(max))
            }
            Kind::Bucket { rate, burst } => {
                let max = [100usize, 1_000, 10_000]
                    .iter()
                    .map(|&l| interval_ratio(&t.per_ms, l, rate, burst))
                    .fold(0.0, f64::max);
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
