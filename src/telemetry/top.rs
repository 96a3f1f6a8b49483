//! Who is being limited right now: per domain, the descriptors with the most OVER_LIMIT
//! answers over the last minute and the last hour, on this instance, in bounded memory.
//!
//! Each window is a ring of Space-Saving sketches (Metwally, Agrawal and El Abbadi, 2005):
//! the minute six of 10 s, the hour six of 10 min; a window's report merges the sketches of its
//! slots (so "the last minute" is the current 10 s slot and the five before it: between 50 and
//! 60 s). A sketch holds at most [`K`] descriptors. When a new descriptor arrives at a full
//! sketch it takes the place of the one with the smallest count, inheriting that count as its
//! `error`. So every reported count overestimates the true one by at most its `error`
//! (`count - error ≤ true ≤ count`), each error is at most `total / K`, and every descriptor
//! with more than `total / K` OVER_LIMIT answers in the window is reported. Merging adds counts
//! and errors, and a descriptor missing from a full sketch gets that sketch's smallest count
//! added to both (the mergeable-summaries rule), so the bound holds for the window.
//!
//! Memory is bounded by design: [`K`] entries per sketch, twelve sketches and a 60-minute
//! series per domain, at most [`MAX_DOMAINS`] domains (only configured ones are recorded), and
//! a descriptor's key is its entries through the log's bound (64 characters per key and value,
//! control characters escaped). Values are attacker-controlled: they are served as JSON
//! (`GET /top`) and on the status page, escaped, and never as metric labels. Recording takes
//! one short lock, and only for OVER_LIMIT answers: a pass over at most [`K`] entries per
//! window, comparing hashes, and no allocation once the sketch is full
//! (`scripts/bench-operator.sh`: +0.4 to 0.6 µs of server CPU per OVER_LIMIT answer in a flood
//! of 1000 keys, where every key misses the sketch; none measurable for OK answers).

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::Mutex;

use crate::base::log_throttle::push_printable;
use crate::pb::common::rate_limit_descriptor::Entry;

/// Descriptors one sketch holds.
pub const K: usize = 64;
/// Domains tracked at once.
pub const MAX_DOMAINS: usize = 1024;
/// Slots per window, and their lengths in seconds (minute, hour).
const SLOTS: usize = 6;
const MINUTE_SLOT_S: u64 = 10;
const HOUR_SLOT_S: u64 = 600;
/// Minutes of the OVER_LIMIT series.
const SERIES: usize = 60;

/// One descriptor's count in a window.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Heavy {
    pub descriptor: String,
    pub over_limit: u64,
    /// How much `over_limit` may overestimate.
    pub error: u64,
}

/// A Space-Saving sketch. At most [`K`] entries, so one pass finds a descriptor or the entry
/// it replaces, and a replaced entry's string is reused: recording allocates only while the
/// sketch fills.
#[derive(Debug, Clone, Default)]
struct Sketch {
    entries: Vec<Heavy>,
    /// Per entry, its key's hash: the pass compares these, and a key only where they match.
    hashes: Vec<u64>,
    total: u64,
}

impl Sketch {
    fn add(&mut self, key: &str, hash: u64) {
        self.total += 1;
        let (mut smallest, mut min_count) = (0, u64::MAX);
        for (i, h) in self.entries.iter_mut().enumerate() {
            if self.hashes[i] == hash && h.descriptor == key {
                h.over_limit += 1;
                return;
            }
            if h.over_limit < min_count {
                (smallest, min_count) = (i, h.over_limit);
            }
        }
        if self.entries.len() < K {
            self.entries.push(Heavy {
                descriptor: key.to_string(),
                over_limit: 1,
                error: 0,
            });
            self.hashes.push(hash);
            return;
        }
        let h = &mut self.entries[smallest];
        h.descriptor.clear();
        h.descriptor.push_str(key);
        h.error = h.over_limit;
        h.over_limit += 1;
        self.hashes[smallest] = hash;
    }

    /// The smallest count a full sketch holds (0 while it has room: nothing was dropped).
    fn floor(&self) -> u64 {
        if self.entries.len() < K {
            0
        } else {
            self.entries.iter().map(|h| h.over_limit).min().unwrap_or(0)
        }
    }

    fn holds(&self, key: &str) -> bool {
        self.entries.iter().any(|h| h.descriptor == key)
    }
}

/// A ring of sketches, one per slot of `slot_s` seconds.
#[derive(Debug, Clone)]
struct Ring {
    slot_s: u64,
    /// Per slot: which slot number (seconds / slot_s) it counts, and its sketch.
    slots: [(u64, Sketch); SLOTS],
}

impl Ring {
    fn new(slot_s: u64) -> Ring {
        Ring {
            slot_s,
            slots: std::array::from_fn(|_| (u64::MAX, Sketch::default())),
        }
    }

    fn add(&mut self, key: &str, hash: u64, now_s: u64) {
        let n = now_s / self.slot_s;
        let (at, sketch) = &mut self.slots[(n % SLOTS as u64) as usize];
        if *at != n {
            *at = n;
            *sketch = Sketch::default();
        }
        sketch.add(key, hash);
    }

    /// The window's merged counts, largest first, and its total.
    fn report(&self, now_s: u64, n: usize) -> (Vec<Heavy>, u64) {
        let current = now_s / self.slot_s;
        let live: Vec<&Sketch> = self
            .slots
            .iter()
            .filter(|(at, _)| *at <= current && current - *at < SLOTS as u64)
            .map(|(_, s)| s)
            .collect();
        let mut merged: HashMap<&str, (u64, u64)> = HashMap::new();
        for s in &live {
            for h in &s.entries {
                let e = merged.entry(&h.descriptor).or_default();
                e.0 += h.over_limit;
                e.1 += h.error;
            }
        }
        for s in &live {
            let floor = s.floor();
            if floor == 0 {
                continue;
            }
            for (key, e) in merged.iter_mut() {
                if !s.holds(key) {
                    e.0 += floor;
                    e.1 += floor;
                }
            }
        }
        let mut out: Vec<Heavy> = merged
            .into_iter()
            .map(|(k, (over_limit, error))| Heavy {
                descriptor: k.to_string(),
                over_limit,
                error,
            })
            .collect();
        out.sort_by(|a, b| {
            b.over_limit
                .cmp(&a.over_limit)
                .then_with(|| a.descriptor.cmp(&b.descriptor))
        });
        out.truncate(n);
        (out, live.iter().map(|s| s.total).sum())
    }
}

#[derive(Debug, Clone)]
struct DomainTop {
    minute: Ring,
    hour: Ring,
    /// OVER_LIMIT answers per minute: (minute number, count), a ring.
    series: [(u64, u64); SERIES],
}

/// A domain's report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopReport {
    pub minute: Vec<Heavy>,
    pub hour: Vec<Heavy>,
    pub total_minute: u64,
    pub total_hour: u64,
    /// OVER_LIMIT answers per minute, the last 60 minutes, oldest first (the last is the
    /// current, partial minute).
    pub per_minute: Vec<u64>,
}

/// Every domain's heavy hitters on this instance.
pub struct Top {
    origin: Instant,
    domains: Mutex<HashMap<String, DomainTop>>,
}

impl Default for Top {
    fn default() -> Top {
        Top::new(Instant::now())
    }
}

/// Appends a descriptor's key as reported to `out`: its entries, each key and value through
/// the log's bound.
pub fn push_descriptor_key(out: &mut String, entries: &[Entry]) {
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_printable(out, &e.key);
        out.push('=');
        push_printable(out, &e.value);
    }
}

thread_local! {
    /// The key being recorded: built here, so a descriptor already in the sketch costs no
    /// allocation.
    static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

impl Top {
    pub fn new(origin: Instant) -> Top {
        Top {
            origin,
            domains: Mutex::new(HashMap::new()),
        }
    }

    fn seconds(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_secs()
    }

    /// Counts one OVER_LIMIT answer for `entries` in `domain` (a configured domain) at `at`.
    pub fn record_at(&self, domain: &str, entries: &[Entry], at: Instant) {
        KEY.with_borrow_mut(|key| {
            key.clear();
            push_descriptor_key(key, entries);
            // Hashed before the lock is taken.
            let hash = {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                key.hash(&mut h);
                h.finish()
            };
            self.add(domain, key, hash, self.seconds(at));
        });
    }

    fn add(&self, domain: &str, key: &str, hash: u64, now_s: u64) {
        let mut domains = self.domains.lock();
        if !domains.contains_key(domain) {
            if domains.len() >= MAX_DOMAINS {
                return;
            }
            domains.insert(
                domain.to_string(),
                DomainTop {
                    minute: Ring::new(MINUTE_SLOT_S),
                    hour: Ring::new(HOUR_SLOT_S),
                    series: [(u64::MAX, 0); SERIES],
                },
            );
        }
        let d = domains.get_mut(domain).expect("inserted above");
        d.minute.add(key, hash, now_s);
        d.hour.add(key, hash, now_s);
        let minute = now_s / 60;
        let slot = &mut d.series[(minute % SERIES as u64) as usize];
        if slot.0 != minute {
            *slot = (minute, 0);
        }
        slot.1 += 1;
    }

    pub fn record(&self, domain: &str, entries: &[Entry]) {
        self.record_at(domain, entries, Instant::now());
    }

    /// The top `n` of `domain` as of `at`; `None` when it had no OVER_LIMIT answer.
    pub fn report_at(&self, domain: &str, n: usize, at: Instant) -> Option<TopReport> {
        let now_s = self.seconds(at);
        let domains = self.domains.lock();
        let d = domains.get(domain)?;
        let (minute, total_minute) = d.minute.report(now_s, n);
        let (hour, total_hour) = d.hour.report(now_s, n);
        let current = now_s / 60;
        let per_minute = (0..SERIES as u64)
            .rev()
            .map(|ago| {
                current.checked_sub(ago).map_or(0, |m| {
                    let (at, count) = d.series[(m % SERIES as u64) as usize];
                    if at == m {
                        count
                    } else {
                        0
                    }
                })
            })
            .collect();
        Some(TopReport {
            minute,
            hour,
            total_minute,
            total_hour,
            per_minute,
        })
    }

    pub fn report(&self, domain: &str, n: usize) -> Option<TopReport> {
        self.report_at(domain, n, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn entries(v: &str) -> Vec<Entry> {
        vec![Entry {
            key: "tenant".into(),
            value: v.into(),
        }]
    }

    #[test]
    fn heavy_hitters_are_found_within_the_error_bound_among_many_keys() {
        let t0 = Instant::now();
        let top = Top::new(t0);
        // A skewed stream: tenant hN gets 400 - 20N answers, and 20,000 one-off tenants.
        let mut truth: HashMap<String, u64> = HashMap::new();
        for round in 0..400u64 {
            for h in 0..10u64 {
                if round < 400 - 20 * h {
                    top.record_at("d", &entries(&format!("h{h}")), t0);
                    *truth.entry(format!("tenant=h{h}")).or_default() += 1;
                }
            }
            for j in 0..50 {
                top.record_at("d", &entries(&format!("x{round}-{j}")), t0);
            }
        }
        let r = top.report_at("d", 20, t0).unwrap();
        let total = r.total_minute;
        assert_eq!(total, truth.values().sum::<u64>() + 20_000);
        for h in &r.minute {
            let t = truth.get(&h.descriptor).copied().unwrap_or(1);
            assert!(
                h.over_limit - h.error <= t && t <= h.over_limit,
                "{h:?} true {t}"
            );
            assert!(h.error <= total / K as u64, "{h:?}");
        }
        // Every tenant above total / K is reported, in order.
        let names: Vec<&str> = r.minute.iter().map(|h| h.descriptor.as_str()).collect();
        for h in 0..10u64 {
            if truth[&format!("tenant=h{h}")] > total / K as u64 {
                assert!(
                    names.contains(&format!("tenant=h{h}").as_str()),
                    "{names:?}"
                );
            }
        }
        assert_eq!(names[0], "tenant=h0");
        // Bounded: one sketch never holds more than K.
        let d = top.domains.lock();
        assert!(d["d"]
            .minute
            .slots
            .iter()
            .all(|(_, s)| s.entries.len() <= K));
    }

    #[test]
    fn windows_roll_over_and_the_series_counts_per_minute() {
        let t0 = Instant::now();
        let top = Top::new(t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        top.record_at("d", &entries("a"), at(0));
        top.record_at("d", &entries("a"), at(5));
        top.record_at("d", &entries("b"), at(70));
        let r = top.report_at("d", 20, at(70)).unwrap();
        assert_eq!(
            r.total_minute, 1,
            "the first minute's answers have left the minute"
        );
        assert_eq!(r.minute[0].descriptor, "tenant=b");
        assert_eq!(r.total_hour, 3);
        assert_eq!(
            r.hour[0],
            Heavy {
                descriptor: "tenant=a".into(),
                over_limit: 2,
                error: 0
            }
        );
        assert_eq!(r.per_minute.len(), 60);
        assert_eq!(&r.per_minute[58..], &[2, 1]);
        let later = top.report_at("d", 20, at(2 * 3600)).unwrap();
        assert_eq!((later.total_minute, later.total_hour), (0, 0));
        assert!(later.per_minute.iter().all(|&c| c == 0));
        assert!(top.report_at("other", 20, at(0)).is_none());
    }

    #[test]
    fn hostile_values_are_bounded_and_domains_are_capped() {
        let top = Top::default();
        let long = format!("<script>{}\n", "x".repeat(10_000));
        top.record("d", &entries(&long));
        let r = top.report("d", 20).unwrap();
        let key = &r.minute[0].descriptor;
        assert!(
            key.len() < 100 && key.starts_with("tenant=<script>x") && key.ends_with('…'),
            "{key}"
        );
        for i in 0..MAX_DOMAINS + 10 {
            top.record(&format!("dom{i}"), &entries("a"));
        }
        assert!(top.domains.lock().len() <= MAX_DOMAINS);
    }
}
