//! The statistics themselves: counters kept by statsd name, so that a config reload finds
//! the counters of an unchanged rule again (dashboards never reset), and a timer.
//!
//! A compiled rule holds its [`RuleStats`] (see [`super::name`]): counting a decision
//! is a few relaxed atomic adds. Names built from request values (`detailed_metric`,
//! `value_to_metric`, limit overrides, unknown domains) go through [`Statistics::dynamic`],
//! a map capped at [`MAX_DYNAMIC`] names; past it a rule's hits count under its own key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use std::borrow::Cow;

use parking_lot::{Mutex, RwLock};

use crate::telemetry::stats::mapper::model::{Mapper, Mapping};

use crate::telemetry::stats::mapper::kind::{StatKind, TimerType, DEFAULT_BUCKETS};

/// Most statistics whose names come from request values (all kinds together).
pub const MAX_DYNAMIC: usize = 10_000;

/// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO` default.
pub const DEFAULT_NEAR_LIMIT_RATIO: f32 = 0.8;

/// The six counters envoyproxy/ratelimit keeps per rule, under
/// `ratelimit.service.rate_limit.<key>.<suffix>`.
#[derive(Debug, Default)]
pub struct RuleStats {
    counters: [AtomicU64; 6],
}

/// The statsd name suffixes of [`RuleStats`], in its order.
pub const RULE_SUFFIXES: [&str; 6] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "over_limit_with_local_cache",
    "within_limit",
    "shadow_mode",
];

const TOTAL_HITS: usize = 0;
const OVER_LIMIT: usize = 1;
const NEAR_LIMIT: usize = 2;
const WITHIN_LIMIT: usize = 4;
const SHADOW_MODE: usize = 5;

/// One limit's answer for one descriptor, as counting needs it: usage of the limit before
/// and after the request's hits, in the limit's units.
#[derive(Debug, Clone, Copy)]
pub struct Observation {
    pub hits: u64,
    pub limit: u64,
    pub before: u64,
    pub after: u64,
    /// The limit had no room for the hits.
    pub over: bool,
    /// The rule is in shadow mode.
    pub shadow: bool,
}

impl RuleStats {
    fn add(&self, i: usize, n: u64) {
        if n > 0 {
            self.counters[i].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts in hits as envoyproxy/ratelimit's base limiter does: of the hits that crossed
    /// a threshold only the part beyond it counts there (`near` = ⌊limit × ratio⌋ in f32).
    pub fn observe(&self, o: Observation, near_limit_ratio: f32) {
        let near = (o.limit as f32 * near_limit_ratio).floor() as u64;
        self.add(TOTAL_HITS, o.hits);
        if o.over {
            let beyond = if o.before >= o.limit {
                o.hits
            } else {
                o.after.saturating_sub(o.limit)
            };
            self.add(OVER_LIMIT, beyond);
            if o.before < o.limit {
                self.add(NEAR_LIMIT, o.limit.saturating_sub(near.max(o.before)));
            }
            if o.shadow {
                self.add(SHADOW_MODE, beyond);
            }
        } else {
            if o.after > near {
                let n = if o.before >= near {
                    o.hits
                } else {
                    o.after - near
                };
                self.add(NEAR_LIMIT, n);
            }
            self.add(WITHIN_LIMIT, o.hits);
        }
    }

    /// The six values, in [`RULE_SUFFIXES`] order.
    pub fn values(&self) -> [u64; 6] {
        std::array::from_fn(|i| self.counters[i].load(Ordering::Relaxed))
    }
}

/// A statsd timer: samples in milliseconds, kept as the Prometheus mapping asks (a histogram
/// or the recent samples of a summary), and for a statsd flusher when one drains them.
#[derive(Debug, Default)]
pub struct StatTimer {
    shape: OnceLock<TimerShape>,
    count: AtomicU64,
    /// Sum of the samples, in nanoseconds of milliseconds' worth (ms × 10⁶).
    sum_nanos: AtomicU64,
    recent: Mutex<std::collections::VecDeque<f64>>,
    pending: Mutex<Vec<f64>>,
}

/// Samples a summary computes its quantiles over, and a statsd flusher may hold back.
const RECENT_SAMPLES: usize = 1024;

/// How a timer is exposed, fixed on its first sample from the mapping.
#[derive(Debug)]
pub struct TimerShape {
    pub mapped: Option<crate::telemetry::stats::mapper::model::Mapped>,
    /// `le` bounds (already in the exposed unit) and their counts; empty for a summary.
    pub bounds: Vec<f64>,
    pub buckets: Vec<AtomicU64>,
    /// Multiplies samples (milliseconds) into the exposed unit.
    pub scale: f64,
}

impl StatTimer {
    fn shape(&self, name: &str, mapper: &Mapper) -> &TimerShape {
        self.shape.get_or_init(|| {
            let mapped = match mapper.map(name, StatKind::Timer) {
                Mapping::Drop => None,
                Mapping::Metric(m) => Some(m),
            };
            let bounds = match &mapped {
                Some(m) if m.timer_type == TimerType::Histogram => m
                    .buckets
                    .clone()
                    .unwrap_or_else(|| DEFAULT_BUCKETS.to_vec()),
                _ => Vec::new(),
            };
            let scale = mapped.as_ref().map_or(1.0, mapper_scale);
            TimerShape {
                buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
                bounds,
                mapped,
                scale,
            }
        })
    }

    fn observe(&self, name: &str, mapper: &Mapper, ms: f64, keep_pending: bool) {
        let shape = self.shape(name, mapper);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add((ms * 1e6) as u64, Ordering::Relaxed);
        if shape.bounds.is_empty() {
            let mut recent = self.recent.lock();
            if recent.len() == RECENT_SAMPLES {
                recent.pop_front();
            }
            recent.push_back(ms * shape.scale);
        } else if let Some(i) = shape.bounds.iter().position(|b| ms * shape.scale <= *b) {
            shape.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        if keep_pending {
            let mut pending = self.pending.lock();
            if pending.len() < RECENT_SAMPLES {
                pending.push(ms);
            }
        }
    }

    /// Count, sum (exposed unit), the shape, and the recent samples (exposed unit).
    pub fn snapshot(&self) -> Option<(u64, f64, &TimerShape, Vec<f64>)> {
        let shape = self.shape.get()?;
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e6 * shape.scale;
        let recent = self.recent.lock().iter().copied().collect();
        Some((self.count.load(Ordering::Relaxed), sum, shape, recent))
    }

    /// Takes the samples (milliseconds) recorded since the last call, for a statsd flusher
    /// (kept only after [`Statistics::keep_timer_samples`]; at most 1024 between calls).
    pub fn drain(&self) -> Vec<f64> {
        std::mem::take(&mut *self.pending.lock())
    }
}

/// The service-wide statistics of envoyproxy/ratelimit.
#[derive(Debug, Default)]
struct ServiceCounters {
    config_load_success: AtomicU64,
    config_load_error: AtomicU64,
    redis_error: AtomicU64,
    service_error: AtomicU64,
    global_shadow_mode: AtomicU64,
    total_requests: AtomicU64,
}

/// How one statistic shows to a visitor: its statsd name, kind and cumulative value.
pub struct Visited<'a> {
    pub name: &'a str,
    pub kind: StatKind,
    pub value: u64,
}

/// The statsd name of the gRPC call timer.
pub const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// Every statistic envoyproxy/ratelimit keeps, by statsd name.
pub struct Statistics {
    near_limit_ratio: f32,
    /// `None`: envoyproxy/ratelimit's default mapping.
    mapper: Option<Mapper>,
    /// Rules' statistics by key (`domain.key_value.key2`), found again on reload.
    rules: Mutex<HashMap<String, Arc<RuleStats>>>,
    /// Keys built from request values, at most [`MAX_DYNAMIC`] together with
    /// `domains_not_found`.
    dynamic: RwLock<HashMap<String, Arc<RuleStats>>>,
    domains_not_found: RwLock<HashMap<String, AtomicU64>>,
    overflowed: AtomicBool,
    service: ServiceCounters,
    response_time: StatTimer,
    keep_timer_samples: AtomicBool,
    /// Prometheus names by statsd name (the mapping is applied once per name).
    pub(super) mapped: Mutex<HashMap<String, Mapping>>,
}

impl std::fmt::Debug for Statistics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Statistics")
    }
}

/// A service-wide event envoyproxy/ratelimit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceEvent {
    ConfigLoadSuccess,
    ConfigLoadError,
    /// A call the store could not decide (`should_rate_limit.redis_error`).
    StoreError,
    /// A call refused as invalid (`should_rate_limit.service_error`).
    ServiceError,
    /// Global shadow mode turned an over-limit answer into OK.
    GlobalShadowMode,
}

impl Statistics {
    /// Statistics mapped to Prometheus by `mapper` (envoyproxy/ratelimit's default mapping
    /// when `None`).
    pub fn new(mapper: Option<Mapper>, near_limit_ratio: f32) -> Statistics {
        Statistics {
            near_limit_ratio,
            mapper,
            rules: Mutex::default(),
            dynamic: RwLock::default(),
            domains_not_found: RwLock::default(),
            overflowed: AtomicBool::new(false),
            service: ServiceCounters::default(),
            response_time: StatTimer::default(),
            keep_timer_samples: AtomicBool::new(false),
            mapped: Mutex::default(),
        }
    }

    pub fn near_limit_ratio(&self) -> f32 {
        self.near_limit_ratio
    }

    pub fn mapper(&self) -> &Mapper {
        self.mapper
            .as_ref()
            .unwrap_or_else(|| Mapper::envoyproxy_default())
    }

    /// The statistics of the rule `key` (sanitized), the same ones every time it is asked.
    pub fn rule(&self, key: &str) -> Arc<RuleStats> {
        self.rules
            .lock()
            .entry(key.to_string())
            .or_default()
            .clone()
    }

    /// The statistics of a key built from request values; `None` once [`MAX_DYNAMIC`] such
    /// names exist (logged once).
    pub fn dynamic(&self, key: &str) -> Option<Arc<RuleStats>> {
        if let Some(s) = self.dynamic.read().get(key) {
            return Some(s.clone());
        }
        if !self.has_room() {
            return None;
        }
        Some(
            self.dynamic
                .write()
                .entry(key.to_string())
                .or_default()
                .clone(),
        )
    }

    fn has_room(&self) -> bool {
        let used = self.dynamic.read().len() + self.domains_not_found.read().len();
        if used < MAX_DYNAMIC {
            return true;
        }
        if !self.overflowed.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                limit = MAX_DYNAMIC,
                "envoyproxy statistics named from request values (detailed_metric, \
                 value_to_metric, limit overrides, unknown domains) reached their limit: \
                 further names count under their rule's key, or not at all"
            );
        }
        false
    }

    /// A request for a domain no config declares (`<domain>.domain_not_found`).
    /// envoyproxy/ratelimit counts one per descriptor: `descriptors`.
    pub fn domain_not_found(&self, domain: &str, descriptors: u64) {
        let domain = sanitize(domain);
        if let Some(c) = self.domains_not_found.read().get(domain.as_ref()) {
            c.fetch_add(descriptors, Ordering::Relaxed);
            return;
        }
        if self.has_room() {
            self.domains_not_found
                .write()
                .entry(domain.into_owned())
                .or_default()
                .fetch_add(descriptors, Ordering::Relaxed);
        }
    }

    pub fn service(&self, event: ServiceEvent) {
        let s = &self.service;
        let counter = match event {
            ServiceEvent::ConfigLoadSuccess => &s.config_load_success,
            ServiceEvent::ConfigLoadError => &s.config_load_error,
            ServiceEvent::StoreError => &s.redis_error,
            ServiceEvent::ServiceError => &s.service_error,
            ServiceEvent::GlobalShadowMode => &s.global_shadow_mode,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// One `ShouldRateLimit` call that took `ms` milliseconds.
    pub fn call(&self, ms: f64) {
        self.service.total_requests.fetch_add(1, Ordering::Relaxed);
        let keep = self.keep_timer_samples.load(Ordering::Relaxed);
        self.response_time
            .observe(RESPONSE_TIME, self.mapper(), ms, keep);
    }

    /// Keep timer samples for [`StatTimer::drain`] (a statsd flusher turns this on).
    pub fn keep_timer_samples(&self, on: bool) {
        self.keep_timer_samples.store(on, Ordering::Relaxed);
    }

    /// The timers, by statsd name.
    pub fn timers(&self) -> [(&'static str, &StatTimer); 1] {
        [(RESPONSE_TIME, &self.response_time)]
    }

    /// Calls `f` with every counter: statsd name, kind and cumulative value (zeros too; a
    /// statsd flusher sends the difference since its last visit).
    pub fn visit(&self, f: &mut dyn FnMut(Visited<'_>)) {
        let s = &self.service;
        for (name, c) in [
            (
                "ratelimit.service.config_load_success",
                &s.config_load_success,
            ),
            ("ratelimit.service.config_load_error", &s.config_load_error),
            (
                "ratelimit.service.call.should_rate_limit.redis_error",
                &s.redis_error,
            ),
            (
                "ratelimit.service.call.should_rate_limit.service_error",
                &s.service_error,
            ),
            (
                "ratelimit.service.global_shadow_mode",
                &s.global_shadow_mode,
            ),
            (
                "ratelimit_server.ShouldRateLimit.total_requests",
                &s.total_requests,
            ),
        ] {
            f(Visited {
                name,
                kind: StatKind::Counter,
                value: c.load(Ordering::Relaxed),
            });
        }
        let rule = |key: &str, stats: &RuleStats, f: &mut dyn FnMut(Visited<'_>)| {
            for (suffix, value) in RULE_SUFFIXES.iter().zip(stats.values()) {
                let name = format!("ratelimit.service.rate_limit.{key}.{suffix}");
                f(Visited {
                    name: &name,
                    kind: StatKind::Counter,
                    value,
                });
            }
        };
        for (key, stats) in self.rules.lock().iter() {
            rule(key, stats, f);
        }
        for (key, stats) in self.dynamic.read().iter() {
            rule(key, stats, f);
        }
        for (domain, c) in self.domains_not_found.read().iter() {
            let name = format!("ratelimit.service.rate_limit.{domain}.domain_not_found");
            f(Visited {
                name: &name,
                kind: StatKind::Counter,
                value: c.load(Ordering::Relaxed),
            });
        }
    }
}

/// envoyproxy/ratelimit's `SanitizeStatName`.
pub fn sanitize(name: &str) -> Cow<'_, str> {
    static IPV4: OnceLock<regex::Regex> = OnceLock::new();
    let ipv4 = IPV4.get_or_init(|| {
        regex::Regex::new(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
            .expect("a valid pattern")
    });
    if !name.contains([':', '|']) && !ipv4.is_match(name) {
        return Cow::Borrowed(name);
    }
    let replaced = name.replace([':', '|'], "_");
    Cow::Owned(
        ipv4.replace_all(&replaced, |c: &regex::Captures<'_>| c[0].replace('.', "_"))
            .into_owned(),
    )
}

/// What multiplies a timer's milliseconds into the unit a mapping exposes.
fn mapper_scale(mapped: &crate::telemetry::stats::mapper::model::Mapped) -> f64 {
    mapped.scale.unwrap_or(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(limit: u64, before: u64, hits: u64, over: bool, shadow: bool) -> [u64; 6] {
        let s = RuleStats::default();
        let after = before + hits;
        s.observe(
            Observation {
                hits,
                limit,
                before,
                after,
                over,
                shadow,
            },
            0.8,
        );
        s.values()
    }

    #[test]
    fn counts_in_hits_as_the_base_limiter() {
        // [total_hits, over_limit, near_limit, over_limit_with_local_cache, within, shadow]
        assert_eq!(counted(10, 0, 1, false, false), [1, 0, 0, 0, 1, 0]);
        // 7 → 10 with near at 8: 2 of the 3 hits are near.
        assert_eq!(counted(10, 7, 3, false, false), [3, 0, 2, 0, 3, 0]);
        assert_eq!(counted(10, 9, 1, false, false), [1, 0, 1, 0, 1, 0]);
        // 9 → 12: 2 over, 1 near (10 − max(8, 9)).
        assert_eq!(counted(10, 9, 3, true, false), [3, 2, 1, 0, 0, 0]);
        assert_eq!(counted(10, 10, 3, true, false), [3, 3, 0, 0, 0, 0]);
        assert_eq!(counted(10, 10, 2, true, true), [2, 2, 0, 0, 0, 2]);
    }
}
