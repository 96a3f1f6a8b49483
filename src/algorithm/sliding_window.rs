//! Sliding window: a log of `(time, cost)` charges within the trailing window.
//!
//! Charges in one granule (`window / 1000`, at least 1 ms, epoch-aligned) share an entry
//! stamped with the granule's last microsecond. That moves usage *later*, by less than a
//! granule, so the count can only overstate what the trailing window holds: it never
//! over-admits, and forgets a charge at most one granule after its window. A stamp never
//! moves, so taking a charge back restores the log exactly; a charge's refund mark is its
//! entry's granule index.
//!
//! A charge goes into the granule of `max(now, newest stamp)`, so a clock that steps back
//! never puts an entry before a newer one, and the newest entry always bounds the log's
//! lifetime.

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

/// Adds up to `cost`, stopping at the usage cap; returns the new log (`None` if it stays
/// empty), what was added and the refund mark.
pub fn charge(log: Option<Log>, p: &LimitParams, cost: u64, now: u64) -> (Option<Log>, u64, u64) {
    let mut log = log.unwrap_or(Log {
        entries: VecDeque::new(),
        total: 0,
    });
    let added = cost.min(p.usage_cap().saturating_sub(log.total));
    let g = granule_us(p.window_us);
    let at = log.entries.back().map_or(now, |&(t, _)| t.max(now));
    let granule = at / g;
    if added > 0 {
        log.total += added;
        match log.entries.back_mut() {
            Some(last) if last.0 / g == granule => last.1 += added,
            _ => log.entries.push_back((granule * g + g - 1, added)),
        }
    }
    let log = (!log.entries.is_empty()).then_some(log);
    (log, added, granule)
}

/// Removes `amount` from the entry of granule `mark`; `None` when nothing is left.
pub fn refund(mut log: Log, p: &LimitParams, mark: u64, amount: u64) -> Option<Log> {
    let g = granule_us(p.window_us);
    if let Some(i) = log.entries.iter().position(|&(t, _)| t / g == mark) {
        let take = amount.min(log.entries[i].1);
        log.entries[i].1 -= take;
        log.total -= take;
        if log.entries[i].1 == 0 {
            log.entries.remove(i);
        }
    }
    (!log.entries.is_empty()).then_some(log)
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
