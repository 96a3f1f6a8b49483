//! The local over-limit cache: limits known to be exhausted until a time, so a Redis store
//! can deny without a round trip until then (the deny path of a hot, exhausted key).
//!
//! Entries are keyed by the counter key and checked against the limit's parameters, so a
//! changed limit or a request override never reads a stale entry. Bounded: when full,
//! expired entries are dropped, and if none are, the new entry is not kept.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::limit::LimitParams;

pub struct LocalCache {
    capacity: usize,
    /// key → (parameters, re-check with the store after, exhausted until).
    entries: Mutex<HashMap<String, (LimitParams, u64, u64)>>,
}

impl LocalCache {
    pub fn new(capacity: usize) -> LocalCache {
        LocalCache {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// `Some(until)` when `key` with these parameters is known exhausted until then, and the
    /// entry is not yet due for a re-check.
    pub fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        let entries = self.entries.lock();
        match entries.get(key) {
            Some((p, recheck, until)) if p == params && *recheck > now => Some(*until),
            _ => None,
        }
    }

    /// Remembers `key` exhausted until `until`, trusted without the store until `recheck`.
    pub fn insert(&self, key: &str, params: &LimitParams, now: u64, recheck: u64, until: u64) {
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            entries.retain(|_, (_, r, _)| *r > now);
            if entries.len() >= self.capacity {
                return;
            }
        }
        entries.insert(key.to_string(), (*params, recheck.min(until), until));
    }

    pub fn sweep(&self, now: u64) {
        self.entries.lock().retain(|_, (_, r, _)| *r > now);
    }
}
