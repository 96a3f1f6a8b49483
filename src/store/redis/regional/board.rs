//! What this instance knows of its region's leases: per global limit, the pool's windows as
//! last read from the region's Redis, and what requests admitted and refused since the last
//! flush. The request path reads it to charge a global limit against its lease; it never
//! waits on home, nor on anything but the charge's own script call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::limit::LimitParams;
use crate::plan::Plan;
use crate::store::placement::Placed;
use crate::store::LeaseReport;

/// A view of the pool is used for at most this long after it was read: an instance that
/// cannot read its region's pool stops spending it.
pub const VIEW_LIFE: Duration = Duration::from_millis(500);

/// A lease's counter lives this long past its window's lapse (at least): never reset while
/// the window can be spent, whatever the instances' clocks.
const KEEP_PAST_LAPSE_US: u64 = 60_000_000;

/// One window of a region's pool, on this instance's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolWindow {
    /// The authority's window.
    pub index: u64,
    /// Units granted to the region for it (its safe share added while cut off).
    pub units: u64,
    /// Of them, the safe share.
    pub safe: u64,
    /// Of them, given back to home (counted as spent in the lease counter).
    pub back: u64,
    /// Of them, spent past the grants (a settle's excess) and counted by home since: the
    /// region's, as if granted.
    pub owed: u64,
    pub from: Instant,
    pub until: Instant,
}

/// One global limit's lease, as this instance knows it.
#[derive(Debug, Default)]
pub struct LeaseView {
    windows: Mutex<(Vec<PoolWindow>, Option<Instant>)>,
    /// Units admitted and refused here since the last flush (the refill task's demand).
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    /// The largest cost of one request since the last flush (the lease holds two of them).
    pub largest: AtomicU64,
    /// What the refill task last heard from home (this instance's, if it holds the lock):
    /// the authority's issued count, and when.
    pub issued: Mutex<Option<(u64, Instant)>>,
    /// The lease counter's key without its window (`<prefix>{tag}|…`), as the request path
    /// places it: learnt from a request, or from the pool (any instance writes it there).
    pub key: std::sync::OnceLock<String>,
}

impl LeaseView {
    /// The window spendable at `now`, if the view is fresh.
    pub fn spendable(&self, now: Instant) -> Option<PoolWindow> {
        let w = self.windows.lock();
        let read = w.1?;
        if now.saturating_duration_since(read) > VIEW_LIFE {
            return None;
        }
        w.0.iter()
            .find(|p| p.from <= now && now < p.until && p.units > 0)
            .copied()
    }

    /// Every window last read (for `/counters` and the status page).
    pub fn windows(&self) -> (Vec<PoolWindow>, Option<Instant>) {
        self.windows.lock().clone()
    }

    pub fn set(&self, windows: Vec<PoolWindow>, read: Instant) {
        *self.windows.lock() = (windows, Some(read));
    }
}

/// Every global limit's lease, by the limit's id.
#[derive(Debug, Default)]
pub struct Board {
    leases: RwLock<HashMap<String, Arc<LeaseView>>>,
}

impl Board {
    pub fn lease(&self, id: &str) -> Arc<LeaseView> {
        if let Some(l) = self.leases.read().get(id) {
            return l.clone();
        }
        self.leases
            .write()
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    pub fn get(&self, id: &str) -> Option<Arc<LeaseView>> {
        self.leases.read().get(id).cloned()
    }

    /// Every lease, by id, for the status page.
    pub fn reports(&self, region: &str) -> Vec<LeaseReport> {
        let now = Instant::now();
        let mut out: Vec<LeaseReport> = self
            .leases
            .read()
            .iter()
            .map(|(id, l)| LeaseReport {
                id: id.clone(),
                region: region.to_string(),
                window: l.spendable(now).map(|w| {
                    let left = w.until.saturating_duration_since(now).as_millis() as u64;
                    (w.index, w.units, w.safe, left)
                }),
                issued: l
                    .issued
                    .lock()
                    .map(|(n, at)| (n, now.saturating_duration_since(at).as_millis() as u64)),
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Forgets the limits the config no longer has.
    pub fn retain(&self, ids: &[String]) {
        self.leases.write().retain(|id, _| ids.contains(id));
    }

    /// The request path: every global limit of `plan` is charged against this region's
    /// lease, a counter of its own per authority window (`…|g<window>`) whose limit is what
    /// the region holds for it, kept until well past its lapse. Without a lease the charge is
    /// against nothing (limit 0) and refused. `wall_us`: the clock the store's script counts
    /// windows on.
    pub fn place(&self, plan: &Plan<'_>, placed: &mut Placed<'_>, wall_us: u64) {
        let now = Instant::now();
        for (c, spec) in plan.charges.iter().zip(placed.charges.iter_mut()) {
            let Some(g) = &c.limit.global else {
                continue;
            };
            let lease = self.get(&g.id);
            if let Some(l) = &lease {
                l.key.get_or_init(|| spec.key.to_string());
            }
            let key = spec.key.to_mut();
            // A lease counter ends with its lease (plus a keep-alive), whatever the limit's
            // window: a calendar's period is the authority's, not this charge's.
            spec.params.calendar = None;
            match lease.and_then(|l| l.spendable(now)) {
                Some(w) => {
                    let left = w.until.saturating_duration_since(now).as_micros() as u64;
                    key.push_str("|g");
                    key.push_str(&w.index.to_string());
                    spec.params.limit = w.units;
                    spec.params.burst = w.units;
                    spec.params.ends_at_us =
                        wall_us + left + KEEP_PAST_LAPSE_US.max(spec.params.window_us);
                }
                None => {
                    key.push_str("|g-");
                    spec.params.limit = 0;
                    spec.params.burst = 0;
                    spec.params.ends_at_us =
                        wall_us + KEEP_PAST_LAPSE_US.max(spec.params.window_us);
                }
            }
        }
    }

    /// Until the authority's current window ends, as this instance knows it: the lease's
    /// lapse, else (no lease) the end of the limit's window on `wall_us`'s grid, the
    /// authority's (its windows are its clock's time over the window, or its calendar's
    /// periods). A lease counter is kept a minute past its lapse, so its own end is no answer
    /// for a caller.
    pub fn reset_after_us(&self, id: &str, p: &LimitParams, wall_us: u64) -> u64 {
        let now = Instant::now();
        match self.get(id).and_then(|l| l.spendable(now)) {
            Some(w) => w.until.saturating_duration_since(now).as_micros() as u64,
            None => match &p.calendar {
                Some(c) => c.end_of(wall_us).saturating_sub(wall_us),
                None => p.window_us.max(1) - wall_us % p.window_us.max(1),
            },
        }
    }

    /// After the decision: what each global limit admitted and refused here, and each one's
    /// wait the authority's window, not its lease counter's keep-alive.
    pub fn count(&self, plan: &Plan<'_>, mode: Mode, outcomes: &mut [ChargeOutcome], wall_us: u64) {
        for (c, o) in plan.charges.iter().zip(outcomes.iter_mut()) {
            let Some(g) = &c.limit.global else {
                continue;
            };
            let p = &c.limit.params;
            let left = self.reset_after_us(&g.id, p, wall_us);
            o.wait_us = if o.allowed || c.cost <= p.limit {
                Some(match o.wait_us {
                    Some(w) if o.allowed || w > 0 => w.min(left),
                    _ => left,
                })
            } else {
                None
            };
        }
        if !matches!(mode, Mode::Decide | Mode::CountRejected | Mode::Reserve) {
            return;
        }
        for (c, o) in plan.charges.iter().zip(outcomes) {
            let Some(g) = &c.limit.global else {
                continue;
            };
            let lease = self.lease(&g.id);
            lease.largest.fetch_max(c.cost, Ordering::Relaxed);
            match o.allowed {
                true => lease.admitted.fetch_add(c.cost, Ordering::Relaxed),
                // A refused check (cost 0) is demand too.
                false => lease.refused.fetch_add(c.cost.max(1), Ordering::Relaxed),
            };
        }
    }
}

/// Whether `plan` charges a global limit (the rest of the store pays one test per charge).
pub fn has_global(plan: &Plan<'_>) -> bool {
    plan.charges.iter().any(|c| c.limit.global.is_some())
}
