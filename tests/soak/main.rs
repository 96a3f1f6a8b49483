//! The soak (issue 58): every feature at once under a fault in every period, in turn.
//!
//! - Region `us`: a 3 + 3 Redis Cluster, every node on a loopback address of its own (so a
//!   primary can be cut off by iptables), and two tollgate instances (A, B) with
//!   `--redis-wait-replicas 1` and `--failure-mode deny`. A third (X) on the same cluster takes
//!   its config over xDS from a control plane of the test's own.
//! - Region `eu` (home of a global limit): a Redis with a replica and one tollgate (C); us
//!   reaches eu's Redis through a proxy 40 ms away.
//! - A real Envoy in front of A for part of the traffic.
//!
//! Each period (30 s; 60 s in the long form) callers race on fresh keys of every kind of limit
//! (fixed, sliding, bucket and calendar windows, a tenant limit under a shared pool, a
//! concurrency cap, reservations settled on the other instance, class shares, a fair share, a
//! money budget, a bucket that holds answers with `max_wait`, a limit from xDS) while a global
//! limit is loaded from both regions all along, and one fault strikes, in turn: a primary
//! killed, a primary partitioned, a primary paused past the deadline, a primary restarted
//! empty, a config reload, an xDS update. What must hold, per period and at the end (see
//! `load::Tally::violations`): no key admitted past its limit (a primary restarted empty
//! forgets what it held: there, at most twice), every reservation settled or lost with the
//! node's data, every call answered OK or OVER_LIMIT (the failure policy's answer included:
//! never an error), no global window over its limit (but the window a loss hits), no panic in
//! any log, and, in the long form, RSS and Redis's `used_memory` growing at most 5% over the
//! last 30 minutes.
//!
//! `cargo test --release --test soak -- --nocapture` runs the short form (every fault once,
//! about 4 minutes; CI runs it). `TOLLGATE_SOAK_MINUTES=60` runs the long form (a fault every
//! minute), which `scripts/soak.sh` wraps; the table it prints is in RELIABILITY.md.
//! `TOLLGATE_SOAK_FAULTS` names the faults to strike, in turn (comma-separated words of
//! `Fault::word`: killed, partitioned, paused, restarted, reload, xds; default: all). Needs
//! root and iptables, as tests/partition does.

#[path = "../support/mod.rs"]
mod support;

mod faults;
mod fleet;
mod load;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use faults::Fault;
use fleet::Fleet;
use load::Tally;

/// How the run is shaped: the long form or the short one.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub period: Duration,
    pub periods: usize,
    /// The faults struck in turn: every one, or those `TOLLGATE_SOAK_FAULTS` names.
    pub faults: &'static [Fault],
}

impl Shape {
    fn from_env() -> Shape {
        let faults = Fault::chosen(std::env::var("TOLLGATE_SOAK_FAULTS").ok().as_deref());
        match std::env::var("TOLLGATE_SOAK_MINUTES")
            .ok()
            .and_then(|m| m.parse::<u64>().ok())
        {
            Some(minutes) => Shape {
                period: Duration::from_secs(60),
                periods: minutes.max(1) as usize,
                faults,
            },
            None => Shape {
                period: Duration::from_secs(30),
                periods: faults.len(),
                faults,
            },
        }
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as u64
}

#[test]
fn soak_with_every_feature_under_faults() {
    let shape = Shape::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mut fleet = Fleet::start(shape).await;
        let global = fleet.global_load();
        let mut rows: Vec<(usize, Fault, Tally)> = Vec::new();
        let mut samples = Vec::new();
        println!("{}", fleet::TABLE_HEAD);
        for p in 0..shape.periods {
            let fault = shape.faults[p % shape.faults.len()];
            let tally = fleet.period(p, fault).await;
            let sample = support::kit::blocking(|| fleet.sample());
            println!("{}", tally.row(p, fault, &sample));
            eprintln!("period {p}: threads A / B / X / C {:?}", sample.threads);
            samples.push(sample);
            rows.push((p, fault, tally));
        }
        let global = global.finish(&fleet.losses).await;
        let panics = fleet.panics();
        fleet.stop();

        println!("\n{}", fleet::TABLE_HEAD);
        for ((p, fault, tally), sample) in rows.iter().zip(&samples) {
            println!("{}", tally.row(*p, *fault, sample));
        }
        println!("\n{}", global.summary());
        let growth = fleet::growth(&samples, shape);
        println!("{}", growth.summary());
        let mut violations: Vec<String> = rows
            .iter()
            .flat_map(|(p, fault, t)| {
                t.violations(*fault)
                    .into_iter()
                    .map(move |v| format!("period {p} ({}): {v}", fault.name()))
            })
            .collect();
        violations.extend(global.violations());
        violations.extend(growth.violations());
        violations.extend(panics);
        assert!(
            violations.is_empty(),
            "the soak broke a promise (logs in {}):\n{}",
            fleet
                .config_dir
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            violations.join("\n")
        );
        fleet.remove_files();
    });
}

/// Sleeps until `at_ms` (Unix milliseconds).
pub async fn sleep_until_ms(at_ms: u64) {
    let now = now_ms();
    if at_ms > now {
        tokio::time::sleep(Duration::from_millis(at_ms - now)).await;
    }
}
