//! Who spends each budget: per budget limit (a `spend:` limit, or a calendar window), the
//! counters charged most in the current period through this instance, in bounded memory, and
//! exact readings of their use over time for the burn rate (`GET /budgets`, the status page).
//!
//! A budget's spenders are a weighted Space-Saving sketch (Metwally, Agrawal and El Abbadi,
//! 2005) of [`K`] counter keys, weighted by what each charge landed: a key arriving at a full
//! sketch takes the place of the smallest, inheriting its count as its `error`. So a key's
//! `charged` overestimates what this instance charged it in the period by at most its `error`,
//! every error is at most `total / K`, and every counter charged more than `total / K` through
//! this instance in the period is held. The sketch only chooses whom to show: the figures shown
//! are the store's own counters, read back exactly (`admin::budgets`). A period's end starts
//! the sketch over. Each held key keeps up to [`SAMPLES`] exact readings, at most one a
//! minute, taken when the budgets are read (the status page, `GET /budgets`, and once a minute
//! by the server): its burn rate is the difference over the last hour.
//!
//! Memory: at most [`MAX_BUDGETS`] budgets, each [`K`] keys (a counter key, as long as its
//! descriptor's values) and [`SAMPLES`] readings per key. Recording takes one short lock per
//! budget charge that landed, a pass over at most [`K`] entries, and allocates only while a
//! sketch fills (or a replaced key's string grows).

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;

use crate::limit::{Algorithm, Limit};

/// Counter keys one budget's sketch holds.
pub const K: usize = 64;
/// Budgets tracked at once.
pub const MAX_BUDGETS: usize = 1024;
/// Exact readings kept per key, one a minute at most: a little over an hour.
pub const SAMPLES: usize = 64;
/// Readings closer together than this replace each other.
const SAMPLE_EVERY_US: u64 = 60_000_000;
/// The burn rate is measured over the last hour, and only over at least this long.
const BURN_WINDOW_US: u64 = 3_600_000_000;
const BURN_AT_LEAST_US: u64 = 300_000_000;

/// A counter's charges through this instance in the current period, as the sketch holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spender {
    /// The counter key (`{domain|entries}|suffix`, without the store's prefix).
    pub key: String,
    pub charged: u64,
    /// How much `charged` may overestimate.
    pub error: u64,
}

/// A budget as tracked: its limit, its current period and its biggest spenders.
#[derive(Debug, Clone)]
pub struct TrackedBudget {
    pub domain: String,
    pub limit: Limit,
    /// The current period, µs on the wall clock: `[start, end)`.
    pub period: (u64, u64),
    /// Biggest first.
    pub top: Vec<Spender>,
    /// Everything charged through this instance in the period.
    pub total: u64,
}

#[derive(Debug, Default)]
struct SpendSketch {
    entries: Vec<Spender>,
    total: u64,
}

impl SpendSketch {
    fn add(&mut self, key: &str, w: u64) {
        self.total = self.total.saturating_add(w);
        let (mut smallest, mut min) = (0, u64::MAX);
        for (i, s) in self.entries.iter_mut().enumerate() {
            if s.key == key {
                s.charged = s.charged.saturating_add(w);
                return;
            }
            if s.charged < min {
                (smallest, min) = (i, s.charged);
            }
        }
        if self.entries.len() < K {
            self.entries.push(Spender {
                key: key.to_string(),
                charged: w,
                error: 0,
            });
            return;
        }
        let s = &mut self.entries[smallest];
        s.key.clear();
        s.key.push_str(key);
        s.error = s.charged;
        s.charged = s.charged.saturating_add(w);
    }
}

#[derive(Debug)]
struct Track {
    limit: Limit,
    period: (u64, u64),
    sketch: SpendSketch,
    /// Per key the sketch holds: exact readings `(µs, used)`, oldest first.
    samples: HashMap<String, VecDeque<(u64, u64)>>,
}

/// Every budget's spenders on this instance.
#[derive(Debug, Default)]
pub struct Budgets {
    /// Domain → budgets, each told apart by its limit's label and key suffix.
    domains: Mutex<HashMap<String, Vec<Track>>>,
}

/// Whether `limit` is a budget: a `spend:` limit or a calendar window (not a pool's class,
/// tenant or active count, nor a concurrency cap).
pub fn is_budget(limit: &Limit) -> bool {
    let p = &limit.params;
    (limit.spend || p.calendar.is_some())
        && p.algorithm != Algorithm::Concurrency
        && p.borrow_until == 0
        && p.fair_floor == 0
        && p.fair_cap == 0
}

/// The period of `limit` holding `now_us`: its calendar period, else its fixed window.
pub fn period_of(limit: &Limit, now_us: u64) -> (u64, u64) {
    match &limit.params.calendar {
        Some(c) => c.period(now_us),
        None => {
            let w = limit.params.window_us.max(1);
            let start = now_us - now_us % w;
            (start, start + w)
        }
    }
}

/// Whom a counter key counts, as people read it: its descriptor entries after the domain,
/// unescaped (`{llm|tenant_spend=acme}|Kmonth@UTC` → `tenant_spend=acme`,
/// `{llm|tier=free|tenant=a%3Db}|model=m|f60` → `tier=free,tenant=a=b,model=m`).
pub fn who(key: &str) -> String {
    // Without its limit's suffix (the last `|…`), its braces and its domain (the first part).
    let body = key.rsplit_once('|').map_or(key, |(body, _)| body);
    let body: String = body.chars().filter(|&c| c != '{' && c != '}').collect();
    let mut parts = body.split('|');
    parts.next();
    let entries: Vec<String> = parts.map(unescape).collect();
    if entries.is_empty() {
        unescape(key)
    } else {
        entries.join(",")
    }
}

/// A counter key's part with its percent-escapes undone.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn same(t: &Track, limit: &Limit) -> bool {
    t.limit.metric_label == limit.metric_label && t.limit.key_suffix == limit.key_suffix
}

impl Budgets {
    /// Counts `cost` landed on `key`, a counter of the budget `limit` in `domain`, at `now_us`
    /// (wall clock).
    pub fn record(&self, domain: &str, limit: &Limit, key: &str, cost: u64, now_us: u64) {
        if cost == 0 {
            return;
        }
        let mut domains = self.domains.lock();
        let tracks = match domains.get_mut(domain) {
            Some(t) => t,
            None => {
                if domains.len() >= MAX_BUDGETS {
                    return;
                }
                domains.entry(domain.to_string()).or_default()
            }
        };
        let i = match tracks.iter().position(|t| same(t, limit)) {
            Some(i) => i,
            None => {
                if tracks.len() >= MAX_BUDGETS {
                    return;
                }
                tracks.push(Track {
                    limit: limit.clone(),
                    period: period_of(limit, now_us),
                    sketch: SpendSketch::default(),
                    samples: HashMap::new(),
                });
                tracks.len() - 1
            }
        };
        let t = &mut tracks[i];
        if now_us >= t.period.1 {
            // A new period: its spenders start over, and so do their readings.
            t.period = period_of(&t.limit, now_us);
            t.sketch = SpendSketch::default();
            t.samples.clear();
        }
        t.sketch.add(key, cost);
    }

    /// Every budget charged in its current period, with its `n` biggest spenders.
    pub fn tracked(&self, n: usize, now_us: u64) -> Vec<TrackedBudget> {
        let domains = self.domains.lock();
        let mut out = Vec::new();
        for (domain, tracks) in domains.iter() {
            for t in tracks {
                if now_us >= t.period.1 {
                    continue; // nothing charged since its period ended
                }
                let mut top = t.sketch.entries.clone();
                top.sort_by(|a, b| b.charged.cmp(&a.charged).then_with(|| a.key.cmp(&b.key)));
                top.truncate(n);
                out.push(TrackedBudget {
                    domain: domain.clone(),
                    limit: t.limit.clone(),
                    period: t.period,
                    top,
                    total: t.sketch.total,
                });
            }
        }
        out.sort_by(|a, b| {
            (a.domain.as_str(), a.limit.metric_label.as_str())
                .cmp(&(b.domain.as_str(), b.limit.metric_label.as_str()))
        });
        out
    }

    /// Keeps an exact reading of `key`'s use, and answers its burn rate: what it used per hour
    /// over the readings of the last hour in this period, and over how long (`None` until
    /// they span five minutes).
    pub fn sample(
        &self,
        domain: &str,
        limit: &Limit,
        key: &str,
        now_us: u64,
        used: u64,
    ) -> Option<(f64, u64)> {
        let mut domains = self.domains.lock();
        let t = domains
            .get_mut(domain)?
            .iter_mut()
            .find(|t| same(t, limit))?;
        if !t.sketch.entries.iter().any(|s| s.key == key) {
            return None;
        }
        let (start, end) = t.period;
        if now_us < start || now_us >= end {
            return None;
        }
        let held: Vec<&str> = t.sketch.entries.iter().map(|s| s.key.as_str()).collect();
        t.samples.retain(|k, _| held.contains(&k.as_str()));
        let ring = t.samples.entry(key.to_string()).or_default();
        match ring.back() {
            Some(&(at, _)) if now_us.saturating_sub(at) < SAMPLE_EVERY_US => {}
            _ => {
                if ring.len() == SAMPLES {
                    ring.pop_front();
                }
                ring.push_back((now_us, used));
            }
        }
        let from = now_us.saturating_sub(BURN_WINDOW_US).max(start);
        let &(then, used_then) = ring.iter().find(|(at, _)| *at >= from)?;
        let span = now_us.saturating_sub(then);
        if span < BURN_AT_LEAST_US {
            return None;
        }
        let per_hour = used.saturating_sub(used_then) as f64 * 3_600_000_000.0 / span as f64;
        Some((per_hour, span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A day's spend budget.
    fn budget() -> Limit {
        let mut l = Limit::from_override(1000, crate::limit::unit::Unit::Day, false);
        l.spend = true;
        l
    }

    #[test]
    fn heavy_spenders_are_held_within_the_error_bound() {
        let b = Budgets::default();
        let l = budget();
        let t0 = 86_400_000_000 * 10;
        // Three heavy keys among 1,000 light ones charged 1 each.
        for round in 0..10 {
            for (k, w) in [("{d|t=a}|x", 500), ("{d|t=b}|x", 300), ("{d|t=c}|x", 200)] {
                b.record("d", &l, k, w, t0 + round);
            }
            for j in 0..100 {
                b.record("d", &l, &format!("{{d|t=x{round}-{j}}}|x"), 1, t0 + round);
            }
        }
        let tracked = b.tracked(3, t0 + 20);
        let top = &tracked[0].top;
        let total = tracked[0].total;
        assert_eq!(total, 10 * (1000 + 100));
        let names: Vec<String> = top.iter().map(|s| who(&s.key)).collect();
        assert_eq!(names, ["t=a", "t=b", "t=c"]);
        for (s, truth) in top.iter().zip([5000, 3000, 2000]) {
            assert!(s.charged >= truth && s.charged - s.error <= truth, "{s:?}");
            assert!(s.error <= total / K as u64, "{s:?}");
        }
        // The period's end starts it over.
        b.record("d", &l, "{d|t=z}|x", 1, t0 + 86_400_000_000);
        let after = b.tracked(3, t0 + 86_400_000_000);
        assert_eq!(after[0].total, 1);
    }

    #[test]
    fn burn_rate_is_the_use_over_the_readings_of_the_last_hour() {
        let b = Budgets::default();
        let l = budget();
        let t0 = 86_400_000_000 * 10;
        b.record("d", &l, "{d|t=a}|x", 10, t0);
        let minute = 60_000_000;
        assert_eq!(b.sample("d", &l, "{d|t=a}|x", t0, 100), None);
        assert_eq!(b.sample("d", &l, "{d|t=a}|x", t0 + 4 * minute, 140), None);
        let (rate, span) = b
            .sample("d", &l, "{d|t=a}|x", t0 + 10 * minute, 200)
            .expect("ten minutes of readings");
        assert_eq!(span, 10 * minute);
        assert!((rate - 600.0).abs() < 1e-9, "{rate}");
        // A key the sketch does not hold keeps no readings.
        assert_eq!(b.sample("d", &l, "{d|t=q}|x", t0, 5), None);
    }

    #[test]
    fn who_reads_the_descriptor_out_of_the_key() {
        assert_eq!(
            who("{llm|tenant_spend=acme}|Kmonth@UTC"),
            "tenant_spend=acme"
        );
        assert_eq!(
            who("{llm|tier=free|tenant=a%3Db%7C}|model=m|f60"),
            "tier=free,tenant=a=b|,model=m"
        );
        assert_eq!(who("{llm|model=*|*}|f60"), "model=*,*");
    }
}
