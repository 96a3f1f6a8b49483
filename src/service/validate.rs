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

/// What is wrong with a request; its message is meant for the caller (`INVALID_ARGUMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    #[error("rate limit domain is {len} bytes; the maximum is {max}")]
    LongDomain { len: usize, max: usize },
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    #[error("request has {count} descriptors; the maximum is {max}")]
    TooManyDescriptors { count: usize, max: usize },
    #[error("hits_addend {hits} is more than the maximum of {max} (--max-hits)")]
    TooManyHits { hits: u32, max: u64 },
    #[error(
        "descriptor {descriptor} has hits_addend {hits}, more than the maximum of {max} (--max-hits)"
    )]
    TooManyDescriptorHits {
        descriptor: usize,
        hits: u64,
        max: u64,
    },
    #[error("descriptor {0} has no entries")]
    NoEntries(usize),
    #[error("descriptor {descriptor} has {count} entries; the maximum is {max}")]
    TooManyEntries {
        descriptor: usize,
        count: usize,
        max: usize,
    },
    #[error("descriptor {descriptor} entry {entry} has an empty key")]
    EmptyKey { descriptor: usize, entry: usize },
    /// `key`: the entry's key, cut to its first 64 characters.
    #[error("descriptor {descriptor} entry {entry} ('{key}') is longer than {max} bytes")]
    LongEntry {
        descriptor: usize,
        entry: usize,
        key: String,
        max: usize,
    },
}

/// Checks a request.
pub fn validate(req: &RateLimitRequest, b: &Bounds) -> Result<(), ValidationError> {
    if req.domain.is_empty() {
        return Err(ValidationError::EmptyDomain);
    }
    if req.domain.len() > b.max_value_len {
        return Err(ValidationError::LongDomain {
            len: req.domain.len(),
            max: b.max_value_len,
        });
    }
    if req.descriptors.is_empty() {
        return Err(ValidationError::NoDescriptors);
    }
    if req.descriptors.len() > b.max_descriptors {
        return Err(ValidationError::TooManyDescriptors {
            count: req.descriptors.len(),
            max: b.max_descriptors,
        });
    }
    if u64::from(req.hits_addend) > b.max_hits {
        return Err(ValidationError::TooManyHits {
            hits: req.hits_addend,
            max: b.max_hits,
        });
    }
    for (i, d) in req.descriptors.iter().enumerate() {
        if let Some(h) = d.hits_addend.filter(|&h| h > b.max_hits) {
            return Err(ValidationError::TooManyDescriptorHits {
                descriptor: i,
                hits: h,
                max: b.max_hits,
            });
        }
        if d.entries.is_empty() {
            return Err(ValidationError::NoEntries(i));
        }
        if d.entries.len() > b.max_entries {
            return Err(ValidationError::TooManyEntries {
                descriptor: i,
                count: d.entries.len(),
                max: b.max_entries,
            });
        }
        for (j, e) in d.entries.iter().enumerate() {
            if e.key.is_empty() {
                return Err(ValidationError::EmptyKey {
                    descriptor: i,
                    entry: j,
                });
            }
            if e.key.len() > b.max_value_len || e.value.len() > b.max_value_len {
                return Err(ValidationError::LongEntry {
                    descriptor: i,
                    entry: j,
                    key: truncate(&e.key, 64).to_string(),
                    max: b.max_value_len,
                });
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
