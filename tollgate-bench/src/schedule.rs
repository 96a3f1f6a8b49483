//! The run's timeline: its phases, and when each open-loop request is due.
//!
//! Pure arithmetic on instants and durations; the loops in [`crate::closed`] and
//! [`crate::open`] and the progress line read their clocks against it.

use std::time::{Duration, Instant};

/// The run's three moments: load starts, measuring starts (after warmup), load stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: Instant,
    pub measure_start: Instant,
    pub end: Instant,
}

impl Window {
    /// Warmup from `start`, then `measure` long measuring.
    pub fn new(start: Instant, warmup: Duration, measure: Duration) -> Window {
        let measure_start = start + warmup;
        Window {
            start,
            measure_start,
            end: measure_start + measure,
        }
    }

    /// `warmup`, `measure`, or `drain` (after the end, while calls still finish).
    pub fn phase(&self, now: Instant) -> &'static str {
        if now < self.measure_start {
            "warmup"
        } else if now < self.end {
            "measure"
        } else {
            "drain"
        }
    }
}

/// When open-loop request `i` is due, counted from the start of the run.
pub fn due_offset(i: u64, rate: f64) -> Duration {
    Duration::from_secs_f64(i as f64 / rate)
}

/// How many requests from number `from` on are due inside `[measure_from, end)`.
pub fn due_between(from: u64, rate: f64, measure_from: Duration, end: Duration) -> u64 {
    (from..)
        .map(|i| due_offset(i, rate))
        .take_while(|&due| due < end)
        .filter(|&due| due >= measure_from)
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_the_window() {
        let ms = Duration::from_millis;
        let start = Instant::now();
        let w = Window::new(start, ms(100), ms(400));
        assert_eq!(w.end - w.start, ms(500));
        for (at, phase) in [
            (ms(0), "warmup"),
            (ms(99), "warmup"),
            (ms(100), "measure"),
            (ms(499), "measure"),
            (ms(500), "drain"),
            (ms(900), "drain"),
        ] {
            assert_eq!(w.phase(start + at), phase, "{at:?}");
        }
        let no_warmup = Window::new(start, Duration::ZERO, ms(10));
        assert_eq!(no_warmup.phase(start), "measure");
    }

    #[test]
    fn schedule_is_evenly_spaced() {
        assert_eq!(due_offset(0, 2000.0), Duration::ZERO);
        assert_eq!(due_offset(1, 2000.0), Duration::from_micros(500));
        assert_eq!(due_offset(2000, 2000.0), Duration::from_secs(1));
        assert_eq!(due_offset(1, 3.0), Duration::from_nanos(333_333_333));
    }

    #[test]
    fn due_between_counts_the_measured_window() {
        let s = Duration::from_secs;
        // 100/s, 1 s warmup, 2 s measured: requests 100..300 are measured.
        assert_eq!(due_between(0, 100.0, s(1), s(3)), 200);
        assert_eq!(due_between(250, 100.0, s(1), s(3)), 50);
        assert_eq!(due_between(50, 100.0, s(1), s(3)), 200);
        assert_eq!(due_between(300, 100.0, s(1), s(3)), 0);
    }
}
