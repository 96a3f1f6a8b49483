//! `reservations-bench`: what a reservation costs next to a plain charge, through a running
//! tollgate (scripts/bench-reservations.sh runs it against Redis and reads Redis's CPU).
//!
//! A closed loop of `--concurrency` workers over `--connections` HTTP/2 connections, each on
//! keys `rsv=<0..keys>` of `--domain`:
//! - `--op charge`: `ShouldRateLimit` charging `--actual` (what a usage domain's stream-done
//!   call does);
//! - `--op reserve-settle`: `tollgate.reservations.v1.Reservations/Reserve` of `--estimate`,
//!   then `Settle` of that id with `--actual` (the unused part comes back);
//! - `--op check-charge`: what a reservation replaces in a usage domain (`--usage-domains`):
//!   a check of cost 0 when the request comes, then the charge of `--actual` at its end.
//!
//! Prints one JSON object: per call type its count, calls per second and latency percentiles
//! in µs, and the errors (a call that failed, or a reserve refused or a settle that found no
//! record, both of which mean the limits were too small for the bench).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitRequest;
use tollgate::pb::tollgate::reservations::v1::reservations_client::ReservationsClient;
use tollgate::pb::tollgate::reservations::v1::SettleRequest;
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    Charge,
    ReserveSettle,
    CheckCharge,
}

#[derive(Debug, Parser)]
#[command(
    name = "reservations-bench",
    about = "A reservation's cost next to a plain charge"
)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    addr: String,
    #[arg(long, default_value = "bench")]
    domain: String,
    #[arg(long, value_enum)]
    op: Op,
    /// Distinct values of the `rsv` entry.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// How long to measure, in seconds.
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    #[arg(long, default_value_t = 100)]
    estimate: u64,
    #[arg(long, default_value_t = 60)]
    actual: u64,
}

#[derive(Default)]
struct Tally {
    calls: Vec<(&'static str, Histogram<u64>)>,
    errors: u64,
}

impl Tally {
    fn record(&mut self, op: &'static str, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let h = match self.calls.iter_mut().position(|(name, _)| *name == op) {
            Some(i) => &mut self.calls[i].1,
            None => {
                // 3 significant digits, auto-resizing: valid constants.
                let h = Histogram::new(3).expect("a valid histogram precision");
                self.calls.push((op, h));
                &mut self.calls.last_mut().expect("just pushed").1
            }
        };
        if h.record(us).is_err() {
            h.saturating_record(us);
        }
    }

    fn merge(&mut self, other: Tally) {
        self.errors += other.errors;
        for (op, h) in other.calls {
            match self.calls.iter_mut().find(|(name, _)| *name == op) {
                Some((_, mine)) => {
                    let _ = mine.add(&h);
                }
                None => self.calls.push((op, h)),
            }
        }
    }
}

fn descriptor(key: u64, hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: "rsv".into(),
            value: key.to_string(),
        }],
        hits_addend: Some(hits),
        ..Default::default()
    }
}

async fn worker(args: Arc<Args>, channel: Channel, first: u64, until: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut rls = RateLimitServiceClient::new(channel.clone());
    let mut reservations = ReservationsClient::new(channel);
    let mut key = first;
    while Instant::now() < until {
        key = (key + args.concurrency as u64) % args.keys;
        match args.op {
            Op::Charge => {
                let req = RateLimitRequest {
                    domain: args.domain.clone(),
                    descriptors: vec![descriptor(key, args.actual)],
                    hits_addend: 0,
                };
                let started = Instant::now();
                let ok = rls
                    .should_rate_limit(req)
                    .await
                    .is_ok_and(|r| r.into_inner().overall_code == Code::Ok as i32);
                tally.record("charge", started.elapsed());
                tally.errors += u64::from(!ok);
            }
            Op::CheckCharge => {
                for (name, hits) in [("check", 0), ("usage", args.actual)] {
                    let req = RateLimitRequest {
                        domain: args.domain.clone(),
                        descriptors: vec![descriptor(key, hits)],
                        hits_addend: 0,
                    };
                    let started = Instant::now();
                    let ok = rls
                        .should_rate_limit(req)
                        .await
                        .is_ok_and(|r| r.into_inner().overall_code == Code::Ok as i32);
                    tally.record(name, started.elapsed());
                    tally.errors += u64::from(!ok);
                }
            }
            Op::ReserveSettle => {
                let req = RateLimitRequest {
                    domain: args.domain.clone(),
                    descriptors: vec![descriptor(key, args.estimate)],
                    hits_addend: 0,
                };
                let started = Instant::now();
                let reserved = reservations.reserve(req).await;
                tally.record("reserve", started.elapsed());
                let id = match reserved {
                    Ok(r) if !r.get_ref().reservation_id.is_empty() => {
                        r.into_inner().reservation_id
                    }
                    _ => {
                        tally.errors += 1;
                        continue;
                    }
                };
                let settle = SettleRequest {
                    domain: args.domain.clone(),
                    descriptors: vec![descriptor(key, args.actual)],
                    reservation_id: id,
                };
                let started = Instant::now();
                let done = reservations.settle(settle).await;
                tally.record("settle", started.elapsed());
                tally.errors += u64::from(!done.is_ok_and(|d| d.into_inner().limits > 0));
            }
        }
    }
    tally
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections.max(1) {
        channels.push(Endpoint::from_shared(args.addr.clone())?.connect().await?);
    }
    let total = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::with_capacity(args.concurrency);
    for w in 0..args.concurrency {
        let (args, total) = (args.clone(), total.clone());
        let channel = channels[w % channels.len()].clone();
        tasks.push(tokio::spawn(async move {
            let t = worker(args, channel, w as u64, until).await;
            total.lock().merge(t);
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = std::mem::take(&mut *total.lock());
    let mut ops = serde_json::Map::new();
    for (op, h) in &total.calls {
        ops.insert(
            (*op).into(),
            serde_json::json!({
                "calls": h.len(),
                "per_sec": h.len() as f64 / elapsed,
                "p50_us": h.value_at_quantile(0.5),
                "p99_us": h.value_at_quantile(0.99),
                "p999_us": h.value_at_quantile(0.999),
            }),
        );
    }
    println!(
        "{}",
        serde_json::json!({"op": format!("{:?}", args.op), "seconds": elapsed,
            "errors": total.errors, "calls": ops})
    );
    Ok(())
}
