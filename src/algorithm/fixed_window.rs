//! Fixed window: a count in the epoch-aligned window ending at `end_us`, as
//! envoyproxy/ratelimit counts (windows start at multiples of their length since the epoch).
//! A charge's refund mark is its window's end: a refund only touches the window it charged.
//! A calendar window (`calendar:`) is the same count, in the calendar period holding now.

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

/// The end of a window that starts now: the epoch-aligned window's, the calendar period's, or
/// the one given (`ends_at_us`: a global limit's lease).
pub fn fresh_end(p: &LimitParams, now: u64) -> u64 {
    if p.ends_at_us > 0 {
        return p.ends_at_us;
    }
    match &p.calendar {
        Some(c) => c.end_of(now),
        None => now - now % p.window_us + p.window_us,
    }
}

/// Adds up to `cost`, stopping at the usage cap; returns the new window, what was added and
/// the refund mark.
pub fn charge(w: Option<Window>, p: &LimitParams, cost: u64, now: u64) -> (Window, u64, u64) {
    let w = w.unwrap_or(Window {
        count: 0,
        end_us: fresh_end(p, now),
    });
    let added = cost.min(p.usage_cap().saturating_sub(w.count));
    (
        Window {
            count: w.count + added,
            ..w
        },
        added,
        w.end_us,
    )
}

/// Removes `amount` charged into the window that ends at `mark`; `None` when nothing is left.
pub fn refund(w: Window, mark: u64, amount: u64) -> Option<Window> {
    if w.end_us != mark {
        return Some(w);
    }
    let count = w.count - amount.min(w.count);
    (count > 0).then_some(Window { count, ..w })
}

/// Until the window ends. An untouched window still reports its end, as envoyproxy/ratelimit.
pub fn reset_after(w: Option<&Window>, p: &LimitParams, now: u64) -> u64 {
    match w {
        Some(w) => w.end_us.saturating_sub(now),
        None => fresh_end(p, now) - now,
    }
}

/// A cost that does not fit now fits when the window ends.
pub fn retry_after(w: &Window, now: u64) -> u64 {
    w.end_us.saturating_sub(now)
}

pub fn expires_at(w: &Window) -> u64 {
    w.end_us
}
