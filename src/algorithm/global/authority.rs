//! The home region's side of a global limit: one [`Authority`] per limit, whose state is the
//! authority key in home's Redis. Only refill tasks call it, never a request.

use super::terms::{Ask, GlobalLimit, Grant, Kind, OnPartition};

/// A region as the authority last saw it.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
struct Seen {
    demand: f64,
    target: u64,
    /// When it last asked (`None`: never): its demand counts while this is recent.
    heard: Option<u64>,
    /// The latest answer it confirmed receiving (the authority's time; at first, the
    /// authority's start): its silence is counted from this, so that the authority counts a
    /// safe share no later than the region, counting from that answer's arrival, spends it.
    acked: u64,
    /// Its safe share is counted as issued in the current window.
    safe_counted: bool,
    /// What it last reported holding, `(window, units)` ([`Ask::held`]).
    #[serde(default)]
    held: [(u64, u64); 2],
    /// What it last reported spending past its grants, `(window, units)` ([`Ask::excess`]):
    /// only an increase is counted again.
    #[serde(default)]
    excess: [(u64, u64); 2],
}

/// The home region's authority for one global limit (its state is the authority key).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Authority {
    settings: GlobalLimit,
    window: u64,
    issued: u64,
    /// Units issued already for the next window.
    issued_next: u64,
    /// A bucket's tokens, and when they were last refilled.
    tokens: f64,
    refilled_at: u64,
    regions: Vec<Seen>,
    /// The regions' names, in the order of `regions` (empty: a state written before regions
    /// were kept by name, or the simulation's, which numbers them): a region is found by
    /// name, so adding or reordering regions in `regions:` moves nobody's books.
    #[serde(default)]
    names: Vec<String>,
    /// Someone asked for more than was left in this window.
    short: bool,
    /// Grants nothing before this (a new authority after a failover).
    cautious_until: u64,
    /// Home moved to this region (docs/multi-region.md, "Moving home"): this state is frozen,
    /// copied to the new home as it was, and answers every ask with nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    moved_to: Option<String>,
}

impl Authority {
    pub fn new(settings: GlobalLimit, regions: usize, now: u64) -> Authority {
        let tokens = match settings.kind {
            Kind::Bucket { burst, .. } => burst as f64,
            Kind::Window { .. } => 0.0,
        };
        let mut a = Authority {
            settings,
            window: 0,
            issued: 0,
            issued_next: 0,
            tokens,
            refilled_at: now,
            regions: vec![
                Seen {
                    acked: now,
                    ..Seen::default()
                };
                regions
            ],
            short: false,
            cautious_until: 0,
            names: Vec::new(),
            moved_to: None,
        };
        a.window = a.window_of(now);
        a
    }

    /// A new authority for the regions `names` (the service's: each region by name).
    pub fn named(settings: GlobalLimit, names: &[String], now: u64) -> Authority {
        let mut a = Authority::new(settings, names.len(), now);
        a.names = names.to_vec();
        a
    }

    /// A new primary took over this state (a failover): it grants nothing for a while, so
    /// grants in flight from the old one land or lapse first. Silence is still counted from
    /// the answers the regions confirmed (the old ones' included: never later than theirs).
    pub fn take_over(&mut self, now: u64) {
        self.cautious_until = now + self.settings.caution_us;
    }

    /// The service read this state from home's Redis: the config may have changed the limit,
    /// or added, removed or reordered regions, since it was written (what was issued stays
    /// issued). Each region's books follow its name into the asker's order (`names`, its
    /// config's `regions:`, which an ask's `region` indexes); a region the asker's config does
    /// not name keeps its books after them. A state without names (0.1.0's) numbered regions
    /// by their place, as its config did.
    pub fn reconfigure(&mut self, settings: GlobalLimit, names: &[String]) {
        self.settings = settings;
        if self.names.len() < self.regions.len() {
            let n = self.names.len();
            self.names.extend(
                (n..self.regions.len()).map(|i| names.get(i).cloned().unwrap_or(format!("#{i}"))),
            );
        }
        let fresh = Seen {
            acked: self.refilled_at,
            ..Seen::default()
        };
        let mut regions = Vec::with_capacity(names.len().max(self.regions.len()));
        for name in names {
            let seen = self.names.iter().position(|n| n == name);
            regions.push(seen.map_or(fresh, |i| self.regions[i]));
        }
        let mut kept = names.to_vec();
        for (i, name) in self.names.iter().enumerate() {
            if !names.contains(name) {
                regions.push(self.regions[i]);
                kept.push(name.clone());
            }
        }
        self.regions = regions;
        self.names = kept;
    }

    fn window_of(&self, now: u64) -> u64 {
        self.settings.window_of(now)
    }

    /// The region home moved to, if it did.
    pub fn moved_to(&self) -> Option<&str> {
        self.moved_to.as_deref()
    }

    /// Marks (or, `None`, unmarks) this state as moved: frozen here, copied to the new home.
    pub fn set_moved(&mut self, to: Option<String>) {
        self.moved_to = to;
    }

    /// The window this state last counted in.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The answer of a moved state: nothing granted, the state untouched (its counts went to
    /// the new home), the window's end as this clock sees it.
    pub fn moved_answer(&self, now: u64) -> Grant {
        let window = self.settings.window_of(now);
        Grant {
            units: 0,
            starts_in_us: 0,
            lifetime_us: self
                .settings
                .window_start(window + 1)
                .saturating_sub(now)
                .max(1),
            window,
            reclaim: false,
            at: now,
        }
    }

    /// Units issued in the current window (a bucket: tokens held back from the bucket).
    pub fn issued(&self) -> u64 {
        self.issued
    }

    /// Rolls the window and the bucket forward to `now`, and counts the safe share of every
    /// region silent for `silent_after_us`.
    pub fn advance(&mut self, now: u64) {
        let w = self.window_of(now);
        if w != self.window {
            self.issued = if w == self.window + 1 {
                self.issued_next
            } else {
                0
            };
            self.issued_next = 0;
            self.window = w;
            self.short = false;
            for r in &mut self.regions {
                r.safe_counted = false;
            }
        }
        let safe = self.settings.safe_units();
        if let Kind::Bucket { rate, burst } = self.settings.kind {
            let dt = now.saturating_sub(self.refilled_at) as f64 / 1e6;
            let silent = self.regions.iter().filter(|r| r.safe_counted).count() as f64;
            let share = match self.settings.on_partition {
                OnPartition::SafeShare(s) => s,
                OnPartition::Refuse => 0.0,
            };
            // A silent region's safe share of the rate is its own while it is silent.
            let rate = (rate * (1.0 - share * silent)).max(0.0);
            self.tokens = (self.tokens + rate * dt).min(burst as f64);
            self.refilled_at = now;
        }
        for i in 0..self.regions.len() {
            let r = self.regions[i];
            let silent = now.saturating_sub(r.acked) >= self.settings.silent_after_us;
            if silent && !r.safe_counted && safe > 0 {
                self.regions[i].safe_counted = true;
                match self.settings.kind {
                    Kind::Window { .. } => self.issued += safe,
                    Kind::Bucket { .. } => self.tokens -= safe as f64,
                }
            } else if !silent && r.safe_counted {
                if let Kind::Bucket { .. } = self.settings.kind {
                    self.regions[i].safe_counted = false;
                }
            }
        }
    }

    fn left(&self, next: bool) -> u64 {
        match self.settings.kind {
            Kind::Window { limit, .. } if next => {
                // The regions silent now will have their safe share counted in the next window.
                let silent = self.regions.iter().filter(|r| r.safe_counted).count() as u64;
                limit.saturating_sub(self.issued_next + silent * self.settings.safe_units())
            }
            Kind::Window { limit, .. } => limit.saturating_sub(self.issued),
            Kind::Bucket { .. } => self.tokens.max(0.0).floor() as u64,
        }
    }

    /// A region spent past its grants (a settle's excess) in its latest windows, in all so far
    /// per window: what is new since its last report counts as issued in the current window
    /// (the window it was spent in, or a debt on the one after it).
    fn count_excess(&mut self, region: usize, excess: [(u64, u64); 2]) {
        let mut new = 0u64;
        let seen = self.regions[region].excess;
        for (w, units) in excess.into_iter().filter(|&(_, u)| u > 0) {
            let before = seen.iter().find(|&&(sw, _)| sw == w).map_or(0, |&(_, u)| u);
            // A window older than both it reported before was counted then, or is gone.
            if seen.iter().all(|&(sw, su)| su == 0 || w >= sw) || before > 0 {
                new = new.saturating_add(units.saturating_sub(before));
            }
        }
        self.regions[region].excess = excess;
        if new > 0 {
            match self.settings.kind {
                Kind::Window { .. } => self.issued = self.issued.saturating_add(new),
                Kind::Bucket { .. } => self.tokens -= new as f64,
            }
        }
    }

    /// Answers one ask at `now` (the authority's clock).
    pub fn grant(&mut self, ask: &Ask, now: u64) -> Grant {
        self.advance(now);
        let w = self.window;
        {
            let r = &mut self.regions[ask.region];
            r.demand = ask.demand;
            r.target = ask.target;
            r.heard = Some(now);
            if let Some(at) = ask.last_answer {
                r.acked = r.acked.max(at);
            }
        }
        if ask.given_back > 0 && ask.window == w {
            if let Kind::Window { .. } = self.settings.kind {
                self.issued = self.issued.saturating_sub(ask.given_back);
            }
        }
        self.regions[ask.region].held = ask.held;
        self.count_excess(ask.region, ask.excess);
        if let Kind::Window { .. } = self.settings.kind {
            // Every unit a region holds was issued: a new authority (home's state lost) learns
            // them from the asks during its caution, and grants no window twice to them.
            let held = |window: u64| -> u64 {
                self.regions
                    .iter()
                    .flat_map(|r| r.held)
                    .filter(|&(hw, _)| hw == window)
                    .map(|(_, u)| u)
                    .sum()
            };
            let (now_held, next_held) = (held(w), held(w + 1));
            self.issued = self.issued.max(now_held);
            self.issued_next = self.issued_next.max(next_held);
        }
        let next = ask.next && matches!(self.settings.kind, Kind::Window { .. });
        let end = |w: u64| self.settings.window_start(w + 1).saturating_sub(now);
        let (starts_in_us, lifetime_us) = match self.settings.kind {
            Kind::Window { .. } if next => (end(w), end(w + 1)),
            Kind::Window { .. } => (0, end(w)),
            Kind::Bucket { .. } => (0, self.settings.lifetime_us),
        };
        let left = self.left(next);
        let units = if now < self.cautious_until || ask.want == 0 {
            0
        } else {
            let heard_lately = |r: &&Seen| {
                r.heard
                    .is_some_and(|h| now.saturating_sub(h) < self.settings.silent_after_us)
            };
            let targets: u64 = self
                .regions
                .iter()
                .filter(heard_lately)
                .map(|r| r.target)
                .sum();
            if left >= 4 * targets.max(ask.want) {
                ask.want.min(left)
            } else {
                // Scarce: each region gets at most its part of what is left, by demand.
                let total: f64 = self
                    .regions
                    .iter()
                    .filter(heard_lately)
                    .map(|r| r.demand)
                    .sum();
                let part = if total > 0.0 {
                    (left as f64 * ask.demand / total).floor() as u64
                } else {
                    left / self.regions.len().max(1) as u64
                };
                ask.want.min(left).min(part.max(1))
            }
        };
        if units < ask.want && !next {
            self.short = true;
        }
        match self.settings.kind {
            Kind::Window { .. } if next => self.issued_next += units,
            Kind::Window { .. } => self.issued += units,
            Kind::Bucket { .. } => self.tokens -= units as f64,
        }
        Grant {
            units,
            starts_in_us,
            lifetime_us,
            window: if next { w + 1 } else { w },
            // Once the window is short, surplus leases go back, so the units go where the
            // demand is.
            reclaim: self.short && matches!(self.settings.kind, Kind::Window { .. }),
            at: now,
        }
    }
}
