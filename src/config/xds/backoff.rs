//! Reconnect delays: exponential from `initial` to `max`, each spread by ±`random_factor`
//! when `jitter` is on, so a fleet that lost its control plane together does not return
//! together.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// `XDS_CLIENT_BACKOFF_*`: the delays between reconnect attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    /// Each delay is drawn from `delay × [1 − f, 1 + f]` (f clamped to [0, 1]).
    pub random_factor: f64,
    pub jitter: bool,
}

impl Default for Backoff {
    /// envoyproxy/ratelimit's defaults: 10 s, 60 s, 0.5, jitter on.
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            random_factor: 0.5,
            jitter: true,
        }
    }
}

impl Backoff {
    /// The delay before reconnect attempt `attempt` (0 = the first after a loss): `initial`
    /// doubled per attempt up to `max`, then jittered (never above `max × (1 + f)`).
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .initial
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max.max(self.initial));
        if !self.jitter {
            return base;
        }
        let f = self.random_factor.clamp(0.0, 1.0);
        // A uniform draw in [0, 1): std's per-instance random hash keys, no RNG crate needed.
        let draw = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as f64
            / (u64::MAX as f64 + 1.0);
        base.mul_f64(1.0 - f + 2.0 * f * draw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_jitters_within_the_factor() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1000),
            random_factor: 0.5,
            jitter: false,
        };
        let ms: Vec<u128> = (0..6).map(|a| b.delay(a).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_millis(1000));

        let b = Backoff { jitter: true, ..b };
        let draws: Vec<Duration> = (0..200).map(|_| b.delay(1)).collect();
        assert!(draws
            .iter()
            .all(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_millis(300)));
        // Spread, not one value.
        let lo = draws.iter().min().unwrap();
        let hi = draws.iter().max().unwrap();
        assert!(*hi - *lo > Duration::from_millis(50), "{lo:?}..{hi:?}");
    }
}
