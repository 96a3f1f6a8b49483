//! `tollgate-bench`: a load generator for any Envoy rate limit service.
//!
//! It speaks nothing but `ShouldRateLimit`, so it measures tollgate, envoyproxy/ratelimit or
//! any other RLS server the same way. Two load shapes:
//!
//! - closed loop: `concurrency` workers each send their next request when the last one
//!   answers; this finds the throughput the server sustains.
//! - open loop (`--rate R`): request `i` is due at `start + i/R` whether or not earlier ones
//!   have answered, and its latency counts from that due time. A server that stalls shows up
//!   as latency, not as fewer requests sent (no coordinated omission).
//!
//! [`run`] below reads top-down: parse the descriptor templates, connect, drive one load
//! shape through the [`schedule::Window`], then render the [`report::Report`]. The pure parts
//! are modules of their own, each tested where it lives:
//!
//! - [`args`]: the flags and their parsers;
//! - [`template`]: descriptor templates; each request is built when it is sent, so memory
//!   does not grow with `--keys`;
//! - [`keys`]: which key number each request goes to;
//! - [`schedule`]: the run's phases and the open loop's due times;
//! - `tally`: how calls ended, counted; [`report`]: the table and the JSON.
//!
//! The I/O is at the edges: `load` (connections, one call), `closed` and `open` (the two
//! load shapes, the open one with its scheduler thread) and `progress` (the stderr line).

pub mod args;
mod closed;
pub mod keys;
mod load;
mod open;
mod progress;
pub mod report;
pub mod schedule;
mod tally;
pub mod template;

use std::sync::Arc;
use std::time::Instant;

pub use crate::args::BenchArgs;
use crate::keys::KeyChoice;
use crate::load::Load;
use crate::report::{summarize, Report};
use crate::schedule::Window;
use crate::template::{DescriptorTemplate, RequestTemplate};

/// Runs the benchmark described by `args` and returns the table or JSON to print.
pub async fn run(args: &BenchArgs) -> anyhow::Result<String> {
    let descriptors = args
        .descriptors
        .iter()
        .map(|d| DescriptorTemplate::parse(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let requests =
        RequestTemplate::new(&args.domain, descriptors, args.hits.unwrap_or(0), args.keys)
            .map_err(anyhow::Error::msg)?;
    let keys = KeyChoice::new(args.keys, args.hot_share);
    let concurrency = args.concurrency as usize;
    let connections = args.connections as usize;
    let clients = load::connect(&args.addr, connections, args.grpc_timeout).await?;

    let window = Window::new(Instant::now(), args.warmup, args.duration);
    let load = Arc::new(Load::new(requests, keys, args.timeout, window));
    let ticker = load.progress.start_ticker(window);
    let measured = match args.rate {
        None => closed::run(load.clone(), &clients, concurrency)
            .await
            .map(|t| (t, None)),
        Some(rate) => open::run(load.clone(), clients, rate, concurrency)
            .await
            .map(|(t, s)| (t, Some(s))),
    };
    ticker.stop().await;
    let (tally, schedule) = measured?;

    let last_done = tally.last_done.map_or(window.end, |d| d.max(window.end));
    let report = Report {
        addr: args.addr.clone(),
        domain: args.domain.clone(),
        keys,
        concurrency,
        connections,
        warmup_s: args.warmup.as_secs_f64(),
        duration_s: (last_done - window.measure_start).as_secs_f64(),
        requests: tally.calls(),
        ok: tally.ok,
        over_limit: tally.over_limit,
        unknown: tally.unknown,
        errors: tally.errors.clone(),
        latency: summarize(&tally.latency_us),
        schedule,
    };
    Ok(if args.json {
        format!("{}\n", report.json())
    } else {
        report.table()
    })
}
