//! Leases on hot shared limits (`lease: N`, opt-in): an instance takes N units of a shared
//! fixed-window limit from Redis at a time, with the script call of a request that needed
//! one, and spends them on later requests without a round trip to the limit's key.
//!
//! No unit is spent that Redis has not counted first: a lease is charged to the key in the
//! window it is spent in, and it lapses locally no later than that window ends in Redis (its
//! lifetime is the window's time left as the script saw it, counted from before the call
//! went out). So leases never over-admit. What they cost is the other way: units leased by
//! one instance are not there for the others until they are spent, refunded (on shutdown) or
//! the window ends; at most N per instance (plus the cost of the request that took them), and
//! a lease takes no more than Redis last said was left. Near the limit, a request whose lease
//! cannot be topped up is decided by Redis exactly, as without leases.
//!
//! A charge that a denied request refunds returns to the lease it came from (its window
//! still running), so all-or-nothing holds as before. `remaining` for a leased charge is what
//! Redis had left after this instance's last lease, plus the units this instance still holds.
//! A lease is topped up (to N) by the request that finds it empty or below N/2, one top-up
//! per key in flight on an instance: meanwhile the others spend what it still holds, and
//! those it cannot cover are decided by Redis exactly, so a burst cannot make one instance
//! hoard the limit. When Redis cannot cover a top-up, what the lease holds is spent first.
//! A lease whose limit changed (a config reload) is void.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::Landing;
use crate::base::clock::Clock;
use crate::limit::LimitParams;
use crate::store::placement::{Group, PlacedCharge};
use crate::store::protocol::{GroupAnswer, Refund};

/// This instance's leases, by counter key.
pub struct Leases {
    by_key: Mutex<HashMap<Box<str>, Lease>>,
    /// The scripts' clock, when it is this instance's (`--clock local`, or a test's): a lease
    /// then lapses exactly when its window ends.
    clock: Option<Arc<dyn Clock>>,
    /// With Redis `TIME`, lease times are µs on this instance's monotonic clock since then.
    origin: Instant,
}

struct Lease {
    /// Units charged in Redis and not yet spent here.
    units: u64,
    /// The window they were charged in: its end, in the script's clock (µs).
    mark: u64,
    /// When, at the latest, that window ends (on [`Leases::now`]'s clock).
    until: u64,
    /// What Redis had left for everyone after this instance's last lease or answer, valid
    /// until `known_until`.
    remaining: u64,
    known_until: u64,
    params: LimitParams,
    /// A top-up is in flight.
    refilling: bool,
}

/// Where a leased group's refund ends.
pub enum Refunded {
    /// Every charge went back to its lease (or had nothing to refund): the group's answer.
    Here(GroupAnswer),
    /// Some charges are still to be refunded in Redis (`rest`); those that went
    /// back to their lease (`to_lease`) must keep nothing landed in the answer Redis gives.
    InRedis {
        rest: Vec<Refund>,
        to_lease: Vec<bool>,
    },
}

/// How to run a leased group's decision.
pub enum Lean {
    /// Answered from this instance's leases, with the `now` (in the script's clock) it stands for.
    Local(GroupAnswer, i64),
    /// Ask Redis for the (single) charge's cost plus `top` more units for the lease.
    TopUp(u64),
    /// Ask Redis for exactly what the request costs.
    Exact,
}

/// Units leased but not spent, to refund on shutdown.
pub struct Unspent {
    pub key: String,
    pub params: LimitParams,
    pub units: u64,
    pub mark: u64,
}

impl Lease {
    fn empty(params: LimitParams, now: u64) -> Lease {
        Lease {
            units: 0,
            mark: 0,
            until: now,
            remaining: 0,
            known_until: now,
            params,
            refilling: false,
        }
    }

    fn live(&self, now: u64) -> bool {
        now < self.until
    }

    fn outcome(&self, allowed: bool, now: u64) -> ChargeOutcome {
        ChargeOutcome {
            allowed,
            remaining: self.remaining.saturating_add(self.units),
            wait_us: Some(self.until.saturating_sub(now)),
        }
    }
}

/// Whether a group's charges are all leased (only shared groups have such charges).
pub fn leased(g: &Group, specs: &[PlacedCharge<'_>]) -> bool {
    g.shared && g.charges.iter().all(|&ci| specs[ci].lease > 0)
}

impl Leases {
    /// Leases timed by `clock` when the scripts take their `now` from it, else by this
    /// instance's monotonic clock.
    pub fn new(clock: Option<Arc<dyn Clock>>) -> Leases {
        Leases {
            by_key: Mutex::new(HashMap::new()),
            clock,
            origin: Instant::now(),
        }
    }

    /// Units of `key` this instance holds now.
    pub fn held(&self, key: &str) -> u64 {
        let now = self.now();
        self.by_key
            .lock()
            .get(key)
            .filter(|l| l.live(now))
            .map_or(0, |l| l.units)
    }

    /// Drops this instance's lease on `key` (an operator reset its counter): its units were
    /// counted in the state the reset cleared.
    pub fn forget(&self, key: &str) {
        self.by_key.lock().remove(key);
    }

    /// Now, on the clock lease times are on.
    pub fn now(&self) -> u64 {
        match &self.clock {
            Some(c) => c.now_us(),
            None => self.origin.elapsed().as_micros() as u64,
        }
    }

    /// When a window that the script, called at `sent`, saw end at `mark` in `left` µs has
    /// ended at the latest.
    fn until(&self, sent: u64, left: u64, mark: u64) -> u64 {
        match self.clock {
            Some(_) => mark,
            None => sent.saturating_add(left),
        }
    }

    /// Decides a leased group from the leases when they cover every charge; else says how to
    /// ask Redis. A single charge whose lease is empty or below half its size is sent with a
    /// top-up (`may_top_up`), unless one is in flight or Redis last said nothing is left: then
    /// what the lease holds is spent first.
    pub fn spend(&self, g: &Group, specs: &[PlacedCharge<'_>], now: u64, may_top_up: bool) -> Lean {
        let mut by_key = self.by_key.lock();
        for &ci in &g.charges {
            let s = &specs[ci];
            if let Some(lease) = by_key.get_mut(s.key.as_ref()) {
                if lease.params != s.params {
                    // The limit changed (a reload): the lease is void. Its units stay counted
                    // until its window ends.
                    *lease = Lease::empty(s.params, now);
                }
            }
        }
        if let ([ci], true) = (&g.charges[..], may_top_up) {
            let s = &specs[*ci];
            let lease = by_key
                .entry(s.key.as_ref().into())
                .or_insert_with(|| Lease::empty(s.params, now));
            let held = if lease.live(now) { lease.units } else { 0 };
            let low = held < s.cost.max(1) || held < s.lease / 2;
            let left = if now < lease.known_until {
                lease.remaining.saturating_sub(s.cost)
            } else {
                u64::MAX
            };
            let top = s.lease.saturating_sub(held).min(left);
            if low && top > 0 && !lease.refilling {
                lease.refilling = true;
                return Lean::TopUp(top);
            }
        }
        let mut answer: GroupAnswer = Vec::with_capacity(g.charges.len());
        for &ci in &g.charges {
            let s = &specs[ci];
            let lease = by_key
                .get_mut(s.key.as_ref())
                .filter(|l| l.live(now) && l.units >= s.cost.max(1));
            let Some(lease) = lease else {
                // Not covered: put back what was spent; Redis decides the group exactly.
                for (&ci, (_, landing)) in g.charges.iter().zip(&answer) {
                    if let Some(lease) = by_key.get_mut(specs[ci].key.as_ref()) {
                        lease.units += landing.added;
                    }
                }
                return Lean::Exact;
            };
            lease.units -= s.cost;
            let landing = Landing {
                added: s.cost,
                mark: (lease.mark, 0),
            };
            answer.push((lease.outcome(true, now), landing));
        }
        let lease = &by_key[specs[g.charges[0]].key.as_ref()];
        let left = lease.until.saturating_sub(now);
        let script_now = lease.mark.saturating_sub(left) as i64;
        Lean::Local(answer, script_now)
    }

    /// Records Redis's answer to a top-up of `top` units (`None`: the call failed) sent at
    /// `sent`, and turns it into the request's own answer (its cost, not the lease's).
    pub fn topped_up(
        &self,
        spec: &PlacedCharge<'_>,
        top: u64,
        sent: u64,
        reply: Option<(ChargeOutcome, Landing)>,
    ) -> Option<(ChargeOutcome, Landing)> {
        let mut by_key = self.by_key.lock();
        let lease = by_key.get_mut(spec.key.as_ref())?;
        lease.refilling = false;
        let (outcome, landing) = reply?;
        let window_left = outcome.wait_us.unwrap_or(0);
        lease.remaining = outcome.remaining;
        lease.known_until = sent.saturating_add(window_left);
        if !outcome.allowed || landing.added < spec.cost + top {
            return Some((outcome, landing));
        }
        let now = self.now();
        if !(lease.live(now) && lease.mark == landing.mark.0) {
            lease.units = 0;
            lease.mark = landing.mark.0;
        }
        lease.units += top;
        lease.until = self.until(sent, window_left, landing.mark.0);
        let own = Landing {
            added: spec.cost,
            mark: landing.mark,
        };
        Some((lease.outcome(true, now), own))
    }

    /// Refunds what `refunds` says to the leases it was spent from, where their window is still
    /// running (the rest is Redis's to refund). A charge returned to its lease is refunded: its answer keeps nothing
    /// landed, so nothing refunds it again (a departed caller's decision refunds what
    /// is still landed once it ends).
    pub fn refund(
        &self,
        g: &Group,
        specs: &[PlacedCharge<'_>],
        refunds: &[Refund],
        now: u64,
    ) -> Refunded {
        let mut by_key = self.by_key.lock();
        let mut rest = refunds.to_vec();
        let mut to_lease = vec![false; rest.len()];
        for ((&ci, u), back) in g.charges.iter().zip(rest.iter_mut()).zip(&mut to_lease) {
            if !u.refund {
                continue;
            }
            // Back to the lease it came from (its window still running), as long as that keeps
            // the lease within its size; else Redis refunds it.
            let size = specs[ci].lease;
            if let Some(lease) = by_key.get_mut(specs[ci].key.as_ref()).filter(|l| {
                l.live(now) && l.mark == u.landing.mark.0 && l.units + u.amount() <= size
            }) {
                lease.units += u.amount();
                u.refund = false;
                *back = true;
            }
        }
        if rest.iter().any(|u| u.refund) {
            return Refunded::InRedis { rest, to_lease };
        }
        let mut answer = Vec::with_capacity(rest.len());
        for ((&ci, u), &back) in g.charges.iter().zip(&rest).zip(&to_lease) {
            let outcome = match by_key.get(specs[ci].key.as_ref()) {
                Some(lease) => lease.outcome(u.allowed, now),
                None => ChargeOutcome {
                    allowed: u.allowed,
                    remaining: 0,
                    wait_us: None,
                },
            };
            let kept = if back { Landing::default() } else { u.kept() };
            answer.push((outcome, kept));
        }
        Refunded::Here(answer)
    }

    /// Drops leases whose window has ended.
    pub fn forget_lapsed(&self, now: u64) {
        self.by_key
            .lock()
            .retain(|_, l| l.refilling || l.live(now) || now < l.known_until);
    }

    /// Takes every unspent unit of a running window out of the leases, to refund in Redis.
    pub fn drain(&self, now: u64) -> Vec<Unspent> {
        let mut by_key = self.by_key.lock();
        let mut out = Vec::new();
        for (key, lease) in by_key.iter_mut() {
            if lease.live(now) && lease.units > 0 {
                out.push(Unspent {
                    key: key.to_string(),
                    params: lease.params,
                    units: std::mem::take(&mut lease.units),
                    mark: lease.mark,
                });
            }
        }
        out
    }
}
