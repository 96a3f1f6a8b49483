//! The store's latency over the last minute, for the status page: p50 and p99 of the time the
//! store took to decide a request (`Store::apply`: a script round trip on Redis, the shard
//! locks in memory).
//!
//! Sixty one-second slots of log-scale buckets (four per power of two, so a quantile is
//! reported within 19% above its true value), written with relaxed atomics: recording is a
//! few atomic adds and takes no lock on the decision path. A slot is cleared by the first
//! record of a new second; a sample recorded by another thread in that instant may be lost,
//! which a status display can afford.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Buckets per power of two, and how many powers (1 µs to about 67 s).
const SUB: usize = 4;
const POWERS: usize = 26;
const BUCKETS: usize = SUB * POWERS;
const SLOTS: usize = 60;

struct Slot {
    /// The second (since `origin`) this slot counts, plus one (0: never used).
    second: AtomicU64,
    counts: [AtomicU32; BUCKETS],
}

/// A minute of latencies.
pub struct LatencyWindow {
    origin: Instant,
    slots: Box<[Slot]>,
}

/// Quantiles of the last minute; `None` when nothing was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySummary {
    pub samples: u64,
    pub p50: Duration,
    pub p99: Duration,
}

/// The bucket of `us` microseconds.
fn bucket(us: u64) -> usize {
    let us = us.max(1);
    let power = 63 - us.leading_zeros() as usize;
    // The two bits below the leading one pick the sub-bucket.
    let sub = if power >= 2 {
        ((us >> (power - 2)) & 3) as usize
    } else {
        ((us << (2 - power)) & 3) as usize
    };
    (power * SUB + sub).min(BUCKETS - 1)
}

/// The upper bound of bucket `b`, in µs.
fn upper(b: usize) -> u64 {
    let (power, sub) = (b / SUB, (b % SUB) as u64);
    let base = 1u64 << power;
    base + (base * (sub + 1)) / SUB as u64
}

impl Default for LatencyWindow {
    fn default() -> LatencyWindow {
        LatencyWindow::new(Instant::now())
    }
}

impl LatencyWindow {
    pub fn new(origin: Instant) -> LatencyWindow {
        LatencyWindow {
            origin,
            slots: (0..SLOTS)
                .map(|_| Slot {
                    second: AtomicU64::new(0),
                    counts: std::array::from_fn(|_| AtomicU32::new(0)),
                })
                .collect(),
        }
    }

    fn second(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_secs() + 1
    }

    /// Records one latency, taken at `at`.
    pub fn record_at(&self, at: Instant, took: Duration) {
        let second = self.second(at);
        let slot = &self.slots[(second % SLOTS as u64) as usize];
        if slot.second.load(Ordering::Relaxed) != second
            && slot.second.swap(second, Ordering::Relaxed) != second
        {
            for c in &slot.counts {
                c.store(0, Ordering::Relaxed);
            }
        }
        let b = bucket(took.as_micros().min(u128::from(u64::MAX)) as u64);
        slot.counts[b].fetch_add(1, Ordering::Relaxed);
    }

    pub fn record(&self, took: Duration) {
        self.record_at(Instant::now(), took);
    }

    /// p50 and p99 of the minute before `at`.
    pub fn summary_at(&self, at: Instant) -> Option<LatencySummary> {
        let now = self.second(at);
        let mut counts = [0u64; BUCKETS];
        for slot in self.slots.iter() {
            let s = slot.second.load(Ordering::Relaxed);
            if s != 0 && s <= now && now - s < SLOTS as u64 {
                for (sum, c) in counts.iter_mut().zip(&slot.counts) {
                    *sum += u64::from(c.load(Ordering::Relaxed));
                }
            }
        }
        let samples: u64 = counts.iter().sum();
        if samples == 0 {
            return None;
        }
        let quantile = |q: f64| {
            let rank = ((samples as f64 * q).ceil() as u64).max(1);
            let mut seen = 0;
            for (b, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return Duration::from_micros(upper(b));
                }
            }
            Duration::from_micros(upper(BUCKETS - 1))
        };
        Some(LatencySummary {
            samples,
            p50: quantile(0.50),
            p99: quantile(0.99),
        })
    }

    pub fn summary(&self) -> Option<LatencySummary> {
        self.summary_at(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_values_within_a_quarter_power() {
        for us in [1u64, 2, 3, 5, 7, 100, 999, 1000, 1500, 65_535, 10_000_000] {
            let b = bucket(us);
            assert!(upper(b) >= us, "{us} in bucket {b} up to {}", upper(b));
            assert!(
                upper(b) as f64 <= us as f64 * 1.25 + 1.0,
                "{us}: {}",
                upper(b)
            );
        }
    }

    #[test]
    fn quantiles_cover_the_last_minute_only() {
        let t0 = Instant::now();
        let w = LatencyWindow::new(t0);
        assert_eq!(w.summary_at(t0), None);
        for i in 0..99 {
            w.record_at(
                t0 + Duration::from_millis(i * 10),
                Duration::from_micros(100),
            );
        }
        w.record_at(t0 + Duration::from_secs(1), Duration::from_millis(50));
        let s = w.summary_at(t0 + Duration::from_secs(2)).unwrap();
        assert_eq!(s.samples, 100);
        assert!(s.p50 >= Duration::from_micros(100) && s.p50 <= Duration::from_micros(125));
        assert!(s.p99 >= Duration::from_micros(100) && s.p99 <= Duration::from_micros(125));
        w.record_at(t0 + Duration::from_secs(2), Duration::from_millis(50));
        let s = w.summary_at(t0 + Duration::from_secs(2)).unwrap();
        assert!(s.p99 >= Duration::from_millis(50), "{s:?}");
        // A minute later the first second has left; later still, everything.
        let s = w.summary_at(t0 + Duration::from_secs(60)).unwrap();
        assert_eq!(s.samples, 2);
        assert_eq!(w.summary_at(t0 + Duration::from_secs(200)), None);
        // A slot reused a minute on counts afresh.
        w.record_at(t0 + Duration::from_secs(60), Duration::from_micros(3));
        let s = w.summary_at(t0 + Duration::from_secs(60)).unwrap();
        assert_eq!(s.samples, 3);
    }
}
