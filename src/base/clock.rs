//! Time as an input. Stores ask a `Clock` for "now" so tests can drive time by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Microseconds since the Unix epoch.
    fn now_us(&self) -> u64;
}

/// The machine's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// A clock that only moves when told to; clones share one time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(now_us: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(now_us)))
    }

    pub fn set(&self, now_us: u64) {
        self.0.store(now_us, Ordering::SeqCst);
    }

    pub fn advance(&self, by_us: u64) {
        self.0.fetch_add(by_us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
