//! `shares-bench`: how a contended pool is shared out, through a running tollgate
//! (scripts/bench-shares.sh runs it on the memory store).
//!
//! `--tenants` tenants send open-loop at `--rate` requests a second each, tenant 0 `--noisy`
//! times as fast; tenant 0 and every odd-numbered tenant send `priority=batch`, the others
//! `priority=interactive`. Every request is `model=<--model>, tenant=t<i>, priority=<class>`
//! in `--domain`, whose pool the script configures (with or without `shares:`).
//!
//! Prints per tenant and per class what it asked for and what it got, a second, and its share
//! of what the pool admitted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitRequest;
use tonic::transport::Endpoint;

#[derive(Debug, Parser)]
#[command(name = "shares-bench", about = "How a contended pool is shared out")]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    addr: String,
    #[arg(long, default_value = "pool")]
    domain: String,
    #[arg(long, default_value = "gpt-4o")]
    model: String,
    #[arg(long, default_value_t = 10)]
    tenants: usize,
    /// Requests a second of each quiet tenant.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// How many times as fast tenant 0 sends.
    #[arg(long, default_value_t = 10.0)]
    noisy: f64,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

fn class_of(tenant: usize) -> &'static str {
    if tenant == 0 || tenant % 2 == 1 {
        "batch"
    } else {
        "interactive"
    }
}

fn entry(key: &str, value: &str) -> Entry {
    Entry {
        key: key.into(),
        value: value.into(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let channel = Endpoint::from_shared(args.addr.clone())?.connect().await?;
    let client = RateLimitServiceClient::new(channel);
    let sent: Arc<Vec<AtomicU64>> =
        Arc::new((0..args.tenants).map(|_| AtomicU64::new(0)).collect());
    let got: Arc<Vec<AtomicU64>> = Arc::new((0..args.tenants).map(|_| AtomicU64::new(0)).collect());
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.seconds);
    let mut senders = Vec::new();
    for t in 0..args.tenants {
        let rate = if t == 0 {
            args.rate * args.noisy
        } else {
            args.rate
        };
        let (sent, got, errors) = (sent.clone(), got.clone(), errors.clone());
        let client = client.clone();
        let req = RateLimitRequest {
            domain: args.domain.clone(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![
                    entry("model", &args.model),
                    entry("tenant", &format!("t{t}")),
                    entry("priority", class_of(t)),
                ],
                ..Default::default()
            }],
            hits_addend: 1,
        };
        senders.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            let mut calls = Vec::new();
            while Instant::now() < until {
                tick.tick().await;
                let (mut client, req) = (client.clone(), req.clone());
                let (sent, got, errors) = (sent.clone(), got.clone(), errors.clone());
                calls.push(tokio::spawn(async move {
                    sent[t].fetch_add(1, Ordering::Relaxed);
                    match client.should_rate_limit(req).await {
                        Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => {
                            got[t].fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("a call failed: {e}");
                            }
                        }
                    }
                }));
            }
            for c in calls {
                let _ = c.await;
            }
        }));
    }
    for s in senders {
        s.await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let total: u64 = got.iter().map(|g| g.load(Ordering::Relaxed)).sum();
    let share = |n: u64| 100.0 * n as f64 / total.max(1) as f64;
    println!("| tenant | class | asked /s | admitted /s | share of the pool |");
    println!("|---|---|---|---|---|");
    let mut by_class: Vec<(&str, u64, u64)> = vec![("interactive", 0, 0), ("batch", 0, 0)];
    for t in 0..args.tenants {
        let (s, g) = (
            sent[t].load(Ordering::Relaxed),
            got[t].load(Ordering::Relaxed),
        );
        let class = class_of(t);
        if let Some(c) = by_class.iter_mut().find(|c| c.0 == class) {
            c.1 += s;
            c.2 += g;
        }
        let noisy = if t == 0 { " (noisy)" } else { "" };
        println!(
            "| t{t}{noisy} | {class} | {:.0} | {:.1} | {:.1}% |",
            s as f64 / secs,
            g as f64 / secs,
            share(g)
        );
    }
    for (class, s, g) in by_class {
        println!(
            "| **{class}** | | {:.0} | {:.1} | {:.1}% |",
            s as f64 / secs,
            g as f64 / secs,
            share(g)
        );
    }
    println!(
        "\nadmitted {:.1} /s in all over {secs:.1} s; {} calls failed",
        total as f64 / secs,
        errors.load(Ordering::Relaxed)
    );
    Ok(())
}
