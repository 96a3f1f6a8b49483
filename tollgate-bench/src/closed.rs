//! The closed loop: `concurrency` workers, each sending its next request when the last one
//! answers. It finds the throughput the server sustains.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use crate::load::{call, Client, Load};
use crate::tally::Tally;

/// Runs the workers until the window ends and returns their merged tally.
pub async fn run(load: Arc<Load>, clients: &[Client], concurrency: usize) -> anyhow::Result<Tally> {
    let workers: Vec<_> = (0..concurrency)
        .map(|w| tokio::spawn(worker(load.clone(), w, clients.to_vec())))
        .collect();
    let mut tally = Tally::new();
    for w in workers {
        tally.merge(&w.await.context("bench worker failed")?)?;
    }
    Ok(tally)
}

/// One worker: call after call until the window ends; only calls sent while measuring count.
async fn worker(load: Arc<Load>, worker: usize, mut clients: Vec<Client>) -> Tally {
    let mut rng = load.rng(worker as u64);
    let mut tally = Tally::new();
    // Worker w sends its n-th request on connection (w + n) mod K: round-robin overall.
    let mut next_conn = worker;
    loop {
        let sent = Instant::now();
        if sent >= load.window.end {
            return tally;
        }
        let req = load.next_request(&mut rng);
        let conns = clients.len();
        let outcome = call(&mut clients[next_conn % conns], req, load.timeout).await;
        next_conn += 1;
        let done = Instant::now();
        load.progress.record(outcome);
        if sent >= load.window.measure_start {
            tally.record(outcome, done - sent, done);
        }
    }
}
