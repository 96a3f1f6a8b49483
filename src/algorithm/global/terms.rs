//! What a global limit is and how it is run, and what a region and the authority say to each
//! other: an [`Ask`] each period, a [`Grant`] back.

use crate::limit::calendar::Calendar;

/// What kind of limit is global.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// `limit` units per window of `window_us`, windows aligned on the authority's clock; or,
    /// with `calendar`, per calendar period in its time zone (a tenant's monthly budget),
    /// periods numbered from 1900 ([`Calendar::index`]) and `window_us` nominal.
    Window {
        limit: u64,
        window_us: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        calendar: Option<Calendar>,
    },
    /// A token bucket: `rate` tokens per second, at most `burst` held. A grant of tokens lapses
    /// after [`GlobalLimit::lifetime_us`].
    Bucket { rate: f64, burst: u64 },
}

/// What a region does once it cannot reach the authority.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum OnPartition {
    /// Spend what the lease holds, then refuse.
    Refuse,
    /// Then spend this fraction of the limit per window (of the rate and burst, for a bucket).
    SafeShare(f64),
}

/// How one global limit is run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GlobalLimit {
    pub kind: Kind,
    pub on_partition: OnPartition,
    /// How often a region's refill task runs (and sends a heartbeat when it has nothing to ask).
    pub period_us: u64,
    /// A region not heard from for this long is cut off: the authority counts its safe share,
    /// and the region starts spending it (measured from its last answer).
    pub silent_after_us: u64,
    /// A token grant's lifetime.
    pub lifetime_us: u64,
    /// How long a new authority (after a failover) grants nothing.
    pub caution_us: u64,
}

impl GlobalLimit {
    /// The authority's window holding `now` (its clock, µs since the epoch); a bucket's is 0.
    pub fn window_of(&self, now: u64) -> u64 {
        match self.kind {
            Kind::Window {
                calendar: Some(c), ..
            } => c.index(now),
            Kind::Window { window_us, .. } => now / window_us.max(1),
            Kind::Bucket { .. } => 0,
        }
    }

    /// When the authority's window `w` starts (a bucket: 0).
    pub fn window_start(&self, w: u64) -> u64 {
        match self.kind {
            Kind::Window {
                calendar: Some(c), ..
            } => c.start_of(w),
            Kind::Window { window_us, .. } => w.saturating_mul(window_us),
            Kind::Bucket { .. } => 0,
        }
    }

    /// How long the authority's window `w` is (a calendar month: its days).
    pub fn window_len(&self, w: u64) -> u64 {
        self.window_start(w + 1)
            .saturating_sub(self.window_start(w))
            .max(1)
    }

    /// The units a region may spend per window while cut off (0 with `Refuse`).
    pub fn safe_units(&self) -> u64 {
        let s = match self.on_partition {
            OnPartition::Refuse => return 0,
            OnPartition::SafeShare(s) => s,
        };
        match self.kind {
            Kind::Window { limit, .. } => (limit as f64 * s).floor() as u64,
            Kind::Bucket { burst, .. } => (burst as f64 * s).floor() as u64,
        }
    }
}

/// What a region's refill task sends each period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    pub region: usize,
    /// Units wanted now (0: a heartbeat).
    pub want: u64,
    /// The region's demand (admitted and refused units per second, smoothed).
    pub demand: f64,
    /// What the region's lease target is (three round trips and three periods of its demand).
    pub target: u64,
    /// Units the region removed from its lease since its last ask, for `window`.
    pub given_back: u64,
    /// The authority's window the given-back units were granted in.
    pub window: u64,
    /// The ask is for the next window (sent as the current one nears its end, so a region
    /// starts each window with a lease).
    pub next: bool,
    /// The authority's time ([`Grant::at`]) of the last answer the region received.
    pub last_answer: Option<u64>,
    /// What the region holds of the authority's windows, `(window, units)`: granted to it
    /// (its safe share not included), less what it gave back; `(0, 0)` for none. A new
    /// authority (home's state lost) counts them as issued, so it never grants a window's
    /// units a second time to regions that report what they hold.
    pub held: [(u64, u64); 2],
    /// Units the region's lease counters of its two latest windows hold past what it was
    /// granted there, `(window, units)`, in all so far (a reservation's settle lands its
    /// excess past the lease, as on any limit, a late one on its window's counter): home
    /// counts each increase as issued in its current window.
    pub excess: [(u64, u64); 2],
}

/// The authority's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    pub units: u64,
    /// When the units may first be spent, from when the answer arrives (the next window's
    /// start, for an ask for it; else 0).
    pub starts_in_us: u64,
    /// How long the units may be spent, from when the ask was sent.
    pub lifetime_us: u64,
    /// The window they belong to (a bucket: 0).
    pub window: u64,
    /// The window is short (someone asked for more than was left): a region holding more than
    /// two round trips and two periods of its own demand gives the rest back.
    pub reclaim: bool,
    /// The authority's time when it answered.
    pub at: u64,
}
