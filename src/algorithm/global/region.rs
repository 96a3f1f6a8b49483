//! A region's side of a global limit: its lease, spent by requests without a round trip to
//! home, and its refill task's arithmetic (when to ask, for how much, what to give back).

use super::terms::{Ask, GlobalLimit, Grant, Kind};

/// Lease lifetimes are shortened, and starts delayed, by 1/DRIFT of themselves (0.1%): a
/// region's clock may run at another rate than home's.
const DRIFT: u64 = 1000;

/// How long a request's cost keeps the lease target at two of it.
const LARGEST_FOR_US: u64 = 2_000_000;

/// A smoothed rate (units per second) with a time constant.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    per_s: f64,
    at: u64,
    tau_us: f64,
}

impl Rate {
    pub fn new(tau_us: u64, now: u64) -> Rate {
        Rate {
            per_s: 0.0,
            at: now,
            tau_us: tau_us as f64,
        }
    }

    /// Counts `units` at `now`.
    pub fn add(&mut self, units: u64, now: u64) {
        self.decay(now);
        self.per_s += units as f64 * 1e6 / self.tau_us;
    }

    fn decay(&mut self, now: u64) {
        let dt = now.saturating_sub(self.at) as f64;
        if dt > 0.0 {
            self.per_s *= (-dt / self.tau_us).exp();
            self.at = now;
        }
    }

    pub fn per_s(&mut self, now: u64) -> f64 {
        self.decay(now);
        self.per_s
    }
}

/// Units granted to a region, spendable until they lapse (on the region's clock).
#[derive(Debug, Clone, Copy)]
struct Chunk {
    units: u64,
    starts_at: u64,
    lapses_at: u64,
    window: u64,
}

/// One region's lease of a global limit and its refill task's arithmetic. In the service
/// the lease's units are a counter in the region's Redis; here they are held in memory, the
/// decisions on them the same.
#[derive(Debug, Clone)]
pub struct Region {
    pub index: usize,
    settings: GlobalLimit,
    chunks: Vec<Chunk>,
    demand: Rate,
    /// The round trip to home, smoothed (µs).
    rtt_us: f64,
    /// An ask in flight: when it was sent.
    asked_at: Option<u64>,
    /// When the last answer came (`None`: never).
    answered_at: Option<u64>,
    next_tick: u64,
    /// Units removed from the lease to report in the next ask, and their window.
    given_back: u64,
    given_back_window: u64,
    /// The authority's time of the last answer that came (echoed in each ask: home counts this
    /// region's silence from it, so home counts a safe share before the region spends it).
    last_answer: Option<u64>,
    /// While cut off: the window whose safe share is being spent (a bucket: the local period's
    /// end), and what is left of it. Never reset by an answer: one share per window.
    safe_window: Option<u64>,
    safe_left: u64,
    /// The end of the authority's current window as this region knows it (early by up to a
    /// round trip), and that window's index: kept on the authority's grid by adding windows.
    window_end: Option<u64>,
    window_index: u64,
    /// How much earlier than the authority's `window_end` may be: the answer's way back and
    /// the drift margin, and a drift margin more for each window added since.
    window_slack: u64,
    /// How much later than the authority's `window_end` may be: a drift margin for each
    /// window added since the last answer set it (a slow clock counts a window long).
    window_drift: u64,
    /// The next window's units are asked for (or held).
    next_asked: bool,
    /// Units that lapsed unspent, in all.
    lapsed: u64,
    /// A request was refused since the last ask.
    refused: bool,
    /// Units granted per authority window, less those given back (the two latest windows):
    /// reported in each ask ([`Ask::held`]).
    granted: [(u64, u64); 2],
    /// Units settles landed past the lease per window, in all (the two latest windows):
    /// reported in each ask ([`Ask::excess`]).
    excess: [(u64, u64); 2],
    /// The largest cost of one request lately, and when it was seen: a lease holds at least
    /// two of them (a reservation of 4,096 tokens in a quiet region must fit its lease).
    largest: (u64, u64),
}

/// The slot of `window` among two `(window, units)` counts: its own, else an empty one, else
/// the older window's, made room for it.
fn slot_for(counts: &mut [(u64, u64); 2], window: u64) -> usize {
    if let Some(i) = counts.iter().position(|&(w, _)| w == window) {
        return i;
    }
    let [(w0, u0), (w1, u1)] = *counts;
    let i = if u0 == 0 || (u1 > 0 && w0 <= w1) {
        0
    } else {
        1
    };
    counts[i] = (window, 0);
    i
}

/// What [`Region::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Lease,
    SafeShare,
    Refused,
}

impl Region {
    pub fn new(index: usize, settings: GlobalLimit, rtt_guess_us: u64, now: u64) -> Region {
        Region {
            index,
            settings,
            chunks: Vec::new(),
            demand: Rate::new(500_000, now),
            rtt_us: rtt_guess_us as f64,
            asked_at: None,
            answered_at: Some(now),
            next_tick: now,
            given_back: 0,
            given_back_window: 0,
            last_answer: None,
            safe_window: None,
            safe_left: 0,
            window_end: None,
            window_index: 0,
            window_slack: 0,
            window_drift: 0,
            next_asked: false,
            lapsed: 0,
            refused: false,
            granted: [(0, 0); 2],
            excess: [(0, 0); 2],
            largest: (0, 0),
        }
    }

    /// A request of `cost` units was decided (admitted or refused) at `now`: the lease target
    /// covers two such for the next couple of seconds.
    pub fn cost_seen(&mut self, cost: u64, now: u64) {
        let (big, at) = self.largest;
        if cost >= big || now.saturating_sub(at) > LARGEST_FOR_US {
            self.largest = (cost, now);
        }
    }

    /// Counts `units` granted (negative: given back) for `window` in [`Region::granted`].
    fn hold(&mut self, window: u64, units: i64) {
        let slot = slot_for(&mut self.granted, window);
        let (w, u) = self.granted[slot];
        self.granted[slot] = (w, u.saturating_add_signed(units));
    }

    /// The authority's window this region counts in now, as it knows it.
    pub fn window_index(&self) -> u64 {
        self.window_index
    }

    /// What this region holds, to report in an ask.
    pub fn held(&self) -> [(u64, u64); 2] {
        self.granted
    }

    /// Units spendable now.
    pub fn headroom(&self, now: u64) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.starts_at <= now && c.lapses_at > now)
            .map(|c| c.units)
            .sum()
    }

    /// Units that lapsed unspent so far (stranded).
    pub fn lapsed(&mut self, now: u64) -> u64 {
        self.drop_lapsed(now);
        self.lapsed
    }

    fn drop_lapsed(&mut self, now: u64) {
        let lapsed = &mut self.lapsed;
        self.chunks.retain(|c| {
            if c.lapses_at <= now {
                *lapsed += c.units;
            }
            c.lapses_at > now && c.units > 0
        });
        if let Kind::Window { .. } = self.settings.kind {
            while let Some(end) = self.window_end.filter(|&end| end <= now) {
                // The window this region knew ended: the next one, on the same grid (a
                // calendar's next period as long as it is).
                self.window_index += 1;
                let len = self.settings.window_len(self.window_index);
                self.window_end = Some(end + len);
                self.window_slack += len / DRIFT;
                self.window_drift += len / DRIFT;
                self.next_asked = false;
            }
        }
    }

    /// Cut off: no answer for `silent_after_us`.
    pub fn cut_off(&self, now: u64) -> bool {
        self.answered_at
            .is_none_or(|a| now.saturating_sub(a) >= self.settings.silent_after_us)
    }

    /// The request path: spends `cost` units from the lease (oldest chunk first), else, cut
    /// off with a safe share, from the share. Never waits on home.
    pub fn admit(&mut self, cost: u64, now: u64) -> Admit {
        self.demand.add(cost, now);
        self.cost_seen(cost, now);
        self.drop_lapsed(now);
        if self.headroom(now) >= cost {
            let mut need = cost;
            for c in self.chunks.iter_mut().filter(|c| c.starts_at <= now) {
                let take = need.min(c.units);
                c.units -= take;
                need -= take;
                if need == 0 {
                    break;
                }
            }
            return Admit::Lease;
        }
        if self.cut_off(now) && self.settings.safe_units() > 0 {
            if let Some(window) = self.safe_window_at(now) {
                if self.safe_window != Some(window) {
                    self.safe_window = Some(window);
                    self.safe_left = self.settings.safe_units();
                }
                if self.safe_left >= cost {
                    self.safe_left -= cost;
                    return Admit::SafeShare;
                }
            }
        }
        self.refused = true;
        Admit::Refused
    }

    /// Once the window is short: what this region holds beyond two round trips and two
    /// periods of its own demand.
    pub fn surplus(&mut self, now: u64) -> u64 {
        let keep = (self.target(now) * 2 / 3).max(1);
        self.headroom(now).saturating_sub(keep)
    }

    /// `units` of `window` were removed from this region's lease (in the service, counted as
    /// spent in its Redis first): they come off its chunks, and the next ask reports them.
    pub fn gave_back(&mut self, window: u64, units: u64, now: u64) {
        let mut surplus = units;
        if self.given_back > 0 && self.given_back_window != window {
            // Not yet reported, of another window: those units lapse unspent.
            self.lapsed += self.given_back;
            self.given_back = 0;
        }
        let current =
            |c: &&mut Chunk| c.window == window && c.starts_at <= now && c.lapses_at > now;
        let mut taken = 0;
        for c in self.chunks.iter_mut().filter(current) {
            let take = surplus.min(c.units);
            c.units -= take;
            surplus -= take;
            taken += take;
        }
        if taken > 0 {
            self.given_back += taken;
            self.given_back_window = window;
            self.hold(window, -(taken as i64));
        }
    }

    /// The service's request path: `units` were spent from the regional pool (in the
    /// region's Redis, by any instance) since the refill task last looked. They come off the
    /// lease's chunks as [`Region::admit`] takes them, and count as demand.
    pub fn spent(&mut self, units: u64, now: u64) {
        self.demand.add(units, now);
        self.drop_lapsed(now);
        let mut need = units;
        for c in self.chunks.iter_mut().filter(|c| c.starts_at <= now) {
            let take = need.min(c.units);
            c.units -= take;
            need -= take;
        }
    }

    /// A reservation of window `window` settled: `extra` units more than it reserved landed
    /// (negative: fewer; those come back to the window's lease while it lasts). What the
    /// lease no longer holds lands past it, as a settle's excess lands past any limit; each
    /// ask reports it, and home counts it. In the service the lease counter does this, and
    /// the refill task reads what it holds past the grants.
    pub fn settled(&mut self, window: u64, extra: i64, now: u64) {
        self.drop_lapsed(now);
        let live = |c: &&mut Chunk| c.window == window && c.starts_at <= now && c.lapses_at > now;
        if extra < 0 {
            // Back to the window's lease (a spent chunk is dropped, so a chunk of its own that
            // lapses with the window as this region knows it).
            let back = extra.unsigned_abs();
            match self.chunks.iter_mut().find(live) {
                Some(c) => c.units = c.units.saturating_add(back),
                None if window == self.window_index => {
                    if let Some(end) = self.window_end.filter(|&e| e > now) {
                        self.chunks.push(Chunk {
                            units: back,
                            starts_at: now,
                            lapses_at: end,
                            window,
                        });
                    }
                }
                None => {}
            }
            return;
        }
        let mut need = extra as u64;
        for c in self.chunks.iter_mut().filter(live) {
            let take = need.min(c.units);
            c.units -= take;
            need -= take;
        }
        if need == 0 {
            return;
        }
        let slot = slot_for(&mut self.excess, window);
        self.excess[slot].1 += need;
    }

    /// The service's request path: `units` were refused for want of lease since the refill
    /// task last looked. They count as demand, and a region without a lease asks for one.
    pub fn refused(&mut self, units: u64, now: u64) {
        if units > 0 {
            self.demand.add(units, now);
            self.refused = true;
        }
    }

    /// Cut off with a safe share: the authority's window whose share may be spent, its units,
    /// and when it may be spent (from, until), on this region's clock.
    pub fn safe_share_at(&self, now: u64) -> Option<(u64, u64, u64, u64)> {
        let units = self.settings.safe_units();
        if units == 0 || !self.cut_off(now) {
            return None;
        }
        let Kind::Window { .. } = self.settings.kind else {
            return None;
        };
        let window = self.safe_window_at(now)?;
        let (begun, end) = self.safe_span()?;
        Some((window, units, begun, end))
    }

    /// When this region is sure the authority's current window (as it knows it) has begun
    /// and not yet ended: its known end, early by up to the slack and late by up to the drift.
    fn safe_span(&self) -> Option<(u64, u64)> {
        let end = self.window_end?;
        let slack = self.window_slack.max(self.rtt_us as u64);
        let begun = end.saturating_sub(self.settings.window_len(self.window_index)) + slack;
        Some((begun, end.saturating_sub(self.window_drift)))
    }

    /// The window whose safe share may be spent at `now`: a fixed window's index, once this
    /// region is sure the authority's window has begun (its known end, itself early by up to a
    /// round trip, plus a round trip) and before its known end; a bucket's local period.
    fn safe_window_at(&self, now: u64) -> Option<u64> {
        match self.settings.kind {
            Kind::Window { .. } => {
                let (begun, end) = self.safe_span()?;
                (now >= begun && now < end).then_some(self.window_index)
            }
            Kind::Bucket { rate, burst } => {
                let period = ((burst as f64 / rate) * 1e6) as u64;
                Some(now / period.max(1))
            }
        }
    }

    /// The lease this region aims to hold: three round trips and three periods of its demand
    /// (it asks again once it holds less than two: an ask takes a round trip, and waits up to
    /// a period to be sent).
    fn target(&mut self, now: u64) -> u64 {
        let horizon = (self.rtt_us + self.settings.period_us as f64) / 1e6;
        let rate = (self.demand.per_s(now) * 3.0 * horizon).ceil() as u64;
        // Requests dearer than what that holds (a reservation's estimate, a priced call) need
        // room for two, or a quiet region could never admit one (requests of one unit keep
        // the rate's target: one refused asks for one).
        let (big, at) = self.largest;
        if big > 1 && now.saturating_sub(at) <= LARGEST_FOR_US {
            rate.max(big.saturating_mul(2))
        } else {
            rate
        }
    }

    /// The refill task, run when due: an ask (or a heartbeat) to send, or `None` (not due, or
    /// an ask is still in flight).
    pub fn tick(&mut self, now: u64) -> Option<Ask> {
        if now < self.next_tick {
            return None;
        }
        self.next_tick = now + self.settings.period_us;
        if let Some(sent) = self.asked_at {
            // An ask unanswered for a round trip and more is given up (it or its answer was lost).
            if now.saturating_sub(sent) < self.settings.silent_after_us {
                return None;
            }
        }
        self.drop_lapsed(now);
        // A region without demand holds nothing; one refused for want of units asks for one.
        let target = self.target(now).max(self.refused as u64);
        self.refused = false;
        let headroom = self.headroom(now);
        let low = (target * 2).div_ceil(3);
        // Near the window's end (a round trip and two periods before it), ask for the next.
        let lead = (self.rtt_us + 2.0 * self.settings.period_us as f64) as u64;
        let next = matches!(self.settings.kind, Kind::Window { .. })
            && !self.next_asked
            && target > 0
            && self
                .window_end
                .is_some_and(|end| end.saturating_sub(now) < lead);
        let want = if next {
            target
        } else if headroom < low {
            target - headroom
        } else {
            0
        };
        self.asked_at = Some(now);
        let ask = Ask {
            region: self.index,
            want,
            demand: self.demand.per_s(now),
            target,
            given_back: self.given_back,
            window: self.given_back_window,
            next,
            last_answer: self.last_answer,
            held: self.granted,
            excess: self.excess,
        };
        self.given_back = 0;
        Some(ask)
    }

    /// The ask sent last failed (home answered an error): the next period asks again.
    pub fn ask_failed(&mut self) {
        self.asked_at = None;
    }

    /// The refill task's instance died: its ask in flight and the units it gave back but had
    /// not reported are lost (those lapse unspent); the lease itself, in the region's Redis,
    /// stays. The instance that takes the lock over starts from here.
    pub fn refill_lost(&mut self) {
        self.asked_at = None;
        self.lapsed += self.given_back;
        self.given_back = 0;
    }

    /// The authority's answer to the ask sent at `sent_at`, arriving at `now`.
    pub fn answered(&mut self, grant: &Grant, sent_at: u64, now: u64) {
        if self.asked_at == Some(sent_at) {
            self.asked_at = None;
        }
        let rtt = now.saturating_sub(sent_at) as f64;
        self.rtt_us = 0.8 * self.rtt_us + 0.2 * rtt;
        self.answered_at = Some(now);
        self.last_answer = Some(self.last_answer.unwrap_or(0).max(grant.at));
        // Lifetimes are shortened, and starts delayed, by DRIFT of themselves: this region's
        // clock may run slower, or faster, than home's.
        let lapses_at = sent_at + grant.lifetime_us - grant.lifetime_us / DRIFT;
        let starts_at = if grant.starts_in_us > 0 {
            // Counted from the answer's arrival: never before the authority's window starts.
            self.next_asked = true;
            now + grant.starts_in_us + grant.starts_in_us / DRIFT
        } else {
            if let Kind::Window { .. } = self.settings.kind {
                // The first answer in a window (or a later one, from an earlier ask) sets it.
                if self.window_end.is_none_or(|end| lapses_at > end)
                    || self.window_index != grant.window
                {
                    self.window_end = Some(lapses_at);
                    self.window_index = grant.window;
                    self.window_slack = now.saturating_sub(sent_at) + grant.lifetime_us / DRIFT;
                    self.window_drift = 0;
                }
            }
            0
        };
        if grant.units > 0 {
            self.hold(grant.window, grant.units as i64);
            self.chunks.push(Chunk {
                units: grant.units,
                starts_at,
                lapses_at,
                window: grant.window,
            });
        }
        if grant.reclaim {
            let surplus = self.surplus(now);
            self.gave_back(grant.window, surplus, now);
        }
    }
}
