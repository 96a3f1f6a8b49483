//! The open loop (`--rate R`): request `i` is due at `start + i/R` whether or not earlier
//! ones have answered, and its latency counts from that due time, so a server that stalls
//! shows up as latency rather than as fewer requests sent (no coordinated omission).
//!
//! A scheduler on its own OS thread keeps the time; each due request takes one of
//! `concurrency` in-flight permits and is spawned onto the runtime, which builds and sends it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, TryAcquireError};

use crate::load::{call, Client, Load};
use crate::report::ScheduleStats;
use crate::schedule::{due_between, due_offset};
use crate::tally::{new_histogram, record_us, Tally};

/// Results are recorded into this many locked tallies, so concurrent calls rarely wait on
/// one another's lock.
const TALLY_SHARDS: usize = 16;

/// Sends `rate` requests per second, at most `concurrency` in flight, until the window ends;
/// returns when every call has finished.
pub async fn run(
    load: Arc<Load>,
    clients: Vec<Client>,
    rate: f64,
    concurrency: usize,
) -> anyhow::Result<(Tally, ScheduleStats)> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let shards: Arc<Vec<Mutex<Tally>>> = Arc::new(
        (0..TALLY_SHARDS)
            .map(|_| Mutex::new(Tally::new()))
            .collect(),
    );
    let sent = tokio::task::spawn_blocking({
        let (load, permits, shards) = (load.clone(), permits.clone(), shards.clone());
        let runtime = Handle::current();
        move || send_on_schedule(load, clients, rate, permits, shards, runtime)
    })
    .await
    .context("bench scheduler failed")?;
    // Every permit back means every call has finished (or timed out).
    let all = u32::try_from(concurrency).context("--concurrency too large")?;
    let _drained = permits.acquire_many(all).await?;
    let mut tally = Tally::new();
    for shard in shards.iter() {
        tally.merge(&shard.lock())?;
    }
    tally.record_unsent(sent.unsent);
    let window = (load.window.end - load.window.measure_start).as_secs_f64();
    let stats = ScheduleStats {
        target_rate: rate,
        sent_per_sec: sent.in_window as f64 / window,
        late: sent.late,
        unsent: sent.unsent,
        send_lag_p99_us: sent.lag_us.value_at_quantile(0.99),
        send_lag_max_us: sent.lag_us.max(),
    };
    debug_assert_eq!(tally.calls(), sent.measured + sent.unsent);
    Ok((tally, stats))
}

/// What the scheduler thread counted itself.
struct Sent {
    measured: u64,
    in_window: u64,
    late: u64,
    unsent: u64,
    lag_us: Histogram<u64>,
}

/// The scheduler thread: it can sleep and spin precisely without holding up a runtime
/// worker. Each due request takes an in-flight permit (waiting for one if all are taken).
fn send_on_schedule(
    load: Arc<Load>,
    clients: Vec<Client>,
    rate: f64,
    permits: Arc<Semaphore>,
    shards: Arc<Vec<Mutex<Tally>>>,
    runtime: Handle,
) -> Sent {
    let w = load.window;
    // A request still unsent this long after the end would be a timeout anyway.
    let give_up = tokio::time::Instant::from_std(w.end + load.timeout);
    let mut rng = load.rng(u64::MAX);
    let mut sent = Sent {
        measured: 0,
        in_window: 0,
        late: 0,
        unsent: 0,
        lag_us: new_histogram(),
    };
    let mut i: u64 = 0;
    loop {
        let due = w.start + due_offset(i, rate);
        if due >= w.end {
            break;
        }
        let measured = due >= w.measure_start;
        wait_until(due);
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::NoPermits) => {
                sent.late += u64::from(measured);
                let wait = tokio::time::timeout_at(give_up, permits.clone().acquire_owned());
                match runtime.block_on(wait) {
                    Ok(Ok(p)) => p,
                    _ => break,
                }
            }
            Err(TryAcquireError::Closed) => break,
        };
        let now = Instant::now();
        if measured {
            sent.measured += 1;
            sent.in_window += u64::from(now < w.end);
            record_us(&mut sent.lag_us, now - due);
        }
        let key = load.keys.pick(&mut rng);
        let mut client = clients[(i % clients.len() as u64) as usize].clone();
        let (load, shards) = (load.clone(), shards.clone());
        let shard = (i % TALLY_SHARDS as u64) as usize;
        runtime.spawn(async move {
            let outcome = call(&mut client, load.requests.request(key), load.timeout).await;
            let done = Instant::now();
            load.progress.record(outcome);
            if measured {
                shards[shard].lock().record(outcome, done - due, done);
            }
            drop(permit);
        });
        i += 1;
    }
    sent.unsent = due_between(i, rate, w.measure_start - w.start, w.end - w.start);
    sent
}

/// Sleeps until shortly before `due`, then spins: OS sleeps overshoot by tens of
/// microseconds, and every microsecond late would be counted as server latency.
fn wait_until(due: Instant) {
    const SPIN: Duration = Duration::from_micros(200);
    let now = Instant::now();
    if due > now + SPIN {
        std::thread::sleep(due - now - SPIN);
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}
