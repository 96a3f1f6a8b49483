//! Sliding window: a log of `(time, cost)` charges within the trailing window.
//!
//! Charges in one granule (`window / 1000`, at least 1 ms, epoch-aligned) share an entry
//! stamped with the latest. Merging moves usage *later*, by less than a granule, so the count
//! can only overstate what the trailing window holds: it never over-admits, and forgets a
//! charge at most one granule after its window.

use std::collections::VecDeque;

use crate::limit::LimitParams;

/// Live charges, oldest first, and their sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    pub entries: VecDeque<(u64, u64)>,
    pub total: u64,
}

/// Smallest distance between two separately stored charges.
pub fn granule_us(window_us: u64) -> u64 {
    (window_us / 1_000).max(1_000)
}

/// Drops charges that have left the window; `true` when none is left.
pub fn forget_expired(log: &mut Log, p: &LimitParams, now: u64) -> bool {
    while let Some(&(t, c)) = log.entries.front() {
        if t + p.window_us > now {
            break;
        }
        log.entries.pop_front();
        log.total -= c;
    }
    log.entries.is_empty()
}

pub fn used(log: Option<&Log>) -> u64 {
    log.map_or(0, |l| l.total)
}

pub fn charge(log: Option<Log>, p: &LimitParams, cost: u64, now: u64) -> Log {
    let Some(mut log) = log else {
        return Log {
            entries: VecDeque::from([(now, cost)]),
            total: cost,
        };
    };
    log.total += cost;
    let g = granule_us(p.window_us);
    match log.entries.back_mut() {
        Some(last) if now / g == last.0 / g => {
            last.0 = last.0.max(now);
            last.1 += cost;
        }
        _ => log.entries.push_back((now, cost)),
    }
    log
}

/// Until the newest charge leaves the window.
pub fn reset_after(log: &Log, p: &LimitParams, now: u64) -> u64 {
    log.entries
        .back()
        .map_or(0, |&(t, _)| (t + p.window_us).saturating_sub(now))
}

/// Until enough of the oldest charges have left for `k` to fit (`k` does not fit now).
pub fn retry_after(log: &Log, p: &LimitParams, k: u64, now: u64) -> u64 {
    let need = log.total + k - p.limit;
    let mut freed = 0;
    let mut wait = 0;
    for &(t, c) in &log.entries {
        freed += c;
        wait = (t + p.window_us).saturating_sub(now);
        if freed >= need {
            break;
        }
    }
    wait
}

pub fn expires_at(log: &Log, p: &LimitParams) -> u64 {
    log.entries.back().map_or(0, |&(t, _)| t + p.window_us)
}
