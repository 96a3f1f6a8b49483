//! The live progress line on stderr: once a second, the phase, calls so far and the rate.
//!
//! Every call (warmup included) bumps two atomic counters in [`Progress`]; a [`Ticker`] task
//! reads them each second. On a terminal the line rewrites itself in place (`\r`); elsewhere
//! (a log, a pipe) each tick is a line of its own.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::schedule::Window;
use crate::tally::Outcome;

/// Live counters for the progress line; every call, warmup included.
#[derive(Debug, Default)]
pub struct Progress {
    calls: AtomicU64,
    errors: AtomicU64,
    /// Whether a `\r` line is on the terminal and needs a newline at the end.
    open_line: AtomicBool,
}

impl Progress {
    pub fn record(&self, outcome: Outcome) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if outcome.is_error() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Prints a progress line every second of `window`, from its start until stopped.
    pub fn start_ticker(self: &Arc<Self>, window: Window) -> Ticker {
        let progress = self.clone();
        let tty = std::io::stderr().is_terminal();
        let task = tokio::spawn(async move {
            let start = window.start;
            let mut ticks = tokio::time::interval_at(
                tokio::time::Instant::from_std(start + Duration::from_secs(1)),
                Duration::from_secs(1),
            );
            let (mut last_calls, mut last_at) = (0, start);
            loop {
                ticks.tick().await;
                let now = Instant::now();
                let calls = progress.calls.load(Ordering::Relaxed);
                let rate = (calls - last_calls) as f64 / (now - last_at).as_secs_f64();
                let line = progress_line(
                    now - start,
                    // The phase the interval just measured was mostly in.
                    window.phase(last_at + (now - last_at) / 2),
                    calls,
                    rate,
                    progress.errors.load(Ordering::Relaxed),
                );
                if tty {
                    eprint!("\r{line}\x1b[K");
                    progress.open_line.store(true, Ordering::Relaxed);
                } else {
                    eprintln!("{line}");
                }
                (last_calls, last_at) = (calls, now);
            }
        });
        Ticker {
            task,
            progress: self.clone(),
        }
    }
}

/// The task printing progress lines; [`Ticker::stop`] ends it.
#[derive(Debug)]
pub struct Ticker {
    task: JoinHandle<()>,
    progress: Arc<Progress>,
}

impl Ticker {
    /// Stops the lines and ends an open terminal line, so the report starts on its own line.
    pub async fn stop(self) {
        self.task.abort();
        // Wait for the abort to land, so no progress line can follow the final newline.
        let _ = self.task.await;
        if self.progress.open_line.load(Ordering::Relaxed) {
            eprintln!();
        }
    }
}

/// One progress line: time since start, phase, calls finished, rate over the last tick.
pub fn progress_line(elapsed: Duration, phase: &str, calls: u64, rate: f64, errors: u64) -> String {
    format!(
        "{:>6.1}s  {phase:<7}  calls {calls}  rate {rate:.0}/s  errors {errors}",
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_reads_at_a_glance() {
        assert_eq!(
            progress_line(Duration::from_millis(3000), "measure", 45_123, 15_012.4, 0),
            "   3.0s  measure  calls 45123  rate 15012/s  errors 0"
        );
    }

    #[test]
    fn progress_counts_calls_and_errors() {
        let p = Progress::default();
        p.record(Outcome::Ok);
        p.record(Outcome::OverLimit);
        p.record(Outcome::Error("UNAVAILABLE"));
        assert_eq!(p.calls.load(Ordering::Relaxed), 3);
        assert_eq!(p.errors.load(Ordering::Relaxed), 1);
    }
}
