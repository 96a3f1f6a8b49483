//! Request bounds and shape checks, before any planning: bad input is the caller's fault
//! and gets `INVALID_ARGUMENT` with a message naming what is wrong.

use crate::pb::rls::RateLimitRequest;

/// Limits on what one request may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_descriptors: usize,
    pub max_entries: usize,
    /// Bytes, for each entry key and value.
    pub max_value_len: usize,
    /// Largest cost one descriptor may carry (`--max-hits`).
    pub max_hits: u64,
}

/// The default and the largest `--max-hits`: costs stay far below 2^53, which the Redis
/// scripts hold exactly.
pub const DEFAULT_MAX_HITS: u64 = u32::MAX as u64;
pub const MAX_MAX_HITS: u64 = 1 << 40;

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_descriptors: 64,
            max_entries: 16,
            max_value_len: 1024,
            max_hits: DEFAULT_MAX_HITS,
        }
    }
}

/// Checks a request; the error message is meant for the caller.
pub fn validate(req: &RateLimitRequest, b: &Bounds) -> Result<(), String> {
    if req.domain.is_empty() {
        return Err("rate limit domain must not be empty".into());
    }
    if req.domain.len() > b.max_value_len {
        return Err(format!(
            "rate limit domain is {} bytes; the maximum is {}",
            req.domain.len(),
            b.max_value_len
        ));
    }
    if req.descriptors.is_empty() {
        return Err("rate limit descriptor list must not be empty".into());
    }
    if req.descriptors.len() > b.max_descriptors {
        return Err(format!(
            "request has {} descriptors; the maximum is {}",
            req.descriptors.len(),
            b.max_descriptors
        ));
    }
    if u64::from(req.hits_addend) > b.max_hits {
        return Err(format!(
            "hits_addend {} is more than the maximum of {} (--max-hits)",
            req.hits_addend, b.max_hits
        ));
    }
    for (i, d) in req.descriptors.iter().enumerate() {
        if let Some(h) = d.hits_addend.filter(|&h| h > b.max_hits) {
            return Err(format!(
                "descriptor {i} has hits_addend {h}, more than the maximum of {} (--max-hits)",
                b.max_hits
            ));
        }
        if d.entries.is_empty() {
            return Err(format!("descriptor {i} has no entries"));
        }
        if d.entries.len() > b.max_entries {
            return Err(format!(
                "descriptor {i} has {} entries; the maximum is {}",
                d.entries.len(),
                b.max_entries
            ));
        }
        for (j, e) in d.entries.iter().enumerate() {
            if e.key.is_empty() {
                return Err(format!("descriptor {i} entry {j} has an empty key"));
            }
            if e.key.len() > b.max_value_len || e.value.len() > b.max_value_len {
                return Err(format!(
                    "descriptor {i} entry {j} ('{}') is longer than {} bytes",
                    truncate(&e.key, 64),
                    b.max_value_len
                ));
            }
        }
    }
    Ok(())
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
