//! Fixed window: a count in the epoch-aligned window ending at `end_us`, as
//! envoyproxy/ratelimit counts (windows start at multiples of their length since the epoch).

use crate::limit::LimitParams;

/// Usage of the current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub count: u64,
    pub end_us: u64,
}

pub fn is_expired(w: &Window, now: u64) -> bool {
    w.end_us <= now
}

pub fn used(w: Option<&Window>) -> u64 {
    w.map_or(0, |w| w.count)
}

pub fn charge(w: Option<Window>, p: &LimitParams, cost: u64, now: u64) -> Window {
    match w {
        Some(w) => Window {
            count: w.count + cost,
            ..w
        },
        None => Window {
            count: cost,
            end_us: now - now % p.window_us + p.window_us,
        },
    }
}

/// Until the window ends. An untouched window still reports its end, as envoyproxy/ratelimit.
pub fn reset_after(w: Option<&Window>, p: &LimitParams, now: u64) -> u64 {
    match w {
        Some(w) => w.end_us.saturating_sub(now),
        None => p.window_us - now % p.window_us,
    }
}

/// A cost that does not fit now fits when the window ends.
pub fn retry_after(w: &Window, now: u64) -> u64 {
    w.end_us.saturating_sub(now)
}

pub fn expires_at(w: &Window) -> u64 {
    w.end_us
}
