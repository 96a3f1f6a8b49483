//! A request's id, and concurrency slots at the edges.
//!
//! A request that is OK and reaches `algorithm: concurrency` limits takes slots under a fresh
//! id ([`new_id`]); a reservation is recorded under one too (`service::marked`). The id comes
//! back in the response's dynamic metadata ([`SLOT_KEY`]; Envoy keeps it under
//! `envoy.filters.http.ratelimit`), and a release names it: a descriptor whose last entry is
//! [`RELEASE_KEY`]`=<id>` (what Envoy's `metadata` action sends on the call made when the
//! stream is done) frees what that id holds on the concurrency limits the rest of the
//! descriptor reaches, and charges nothing. Direct callers use the `tollgate.slots.v1.Slots`
//! gRPC service (`serve::slots`): acquire, release, renew.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::algorithm::concurrency::SlotId;

/// The dynamic metadata field holding the id of the slots a request took.
pub const SLOT_KEY: &str = "tollgate.slot";

/// The dynamic metadata field holding the shortest hold of those slots (how long they stay
/// held without a release or renew), in milliseconds. The name is what callers read.
pub const SLOT_LEASE_KEY: &str = "tollgate.slot_lease_ms";

/// The descriptor entry key that makes a descriptor a release of the slot id in its value.
pub const RELEASE_KEY: &str = "tollgate.release";

/// Ids are 26 hex digits: two 52-bit numbers (the Redis script holds numbers as doubles).
const ID_DIGITS: usize = 26;
const HALF: u64 = (1 << 52) - 1;

/// The id 16 bytes make: two 52-bit halves, the high one never 0 (`(0, 0)` is "no id").
/// `new_id` seeds with random bytes, `service::paired` with a hash.
pub fn id_of(bytes: &[u8; 16]) -> SlotId {
    let half = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default()) & HALF;
    (half(&bytes[..8]).max(1), half(&bytes[8..]))
}

/// A fresh slot id: this process's random 52 bits, then a counter that starts at a random
/// point, so ids of two instances (or two runs) do not meet.
pub fn new_id() -> SlotId {
    static PROCESS: OnceLock<(u64, AtomicU64)> = OnceLock::new();
    let (hi, next) = PROCESS.get_or_init(|| {
        let mut seed = [0u8; 16];
        // The clock stands in if the system has no randomness to give.
        if getrandom::fill(&mut seed).is_err() {
            let now = crate::base::clock::Clock::now_us(&crate::base::clock::SystemClock);
            seed[..8].copy_from_slice(&now.to_le_bytes());
            seed[8..].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
        }
        let (hi, lo) = id_of(&seed);
        (hi, AtomicU64::new(lo))
    });
    let lo = next.fetch_add(1, Ordering::Relaxed) & HALF;
    (*hi, lo)
}

/// An id as callers see it: 26 lowercase hex digits.
pub fn format_id(id: SlotId) -> String {
    format!("{:013x}{:013x}", id.0, id.1)
}

/// An id a caller sent back that cannot be one (`INVALID_ARGUMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Not an id tollgate gave out (shown printable).
    #[error(
        "invalid id '{0}': expected the {ID_DIGITS} hex digits an acquire or a reservation returned"
    )]
    BadId(String),
    /// Two descriptors name two ids for one operation (`release` or `settle`).
    #[error("a request may {0} one id; found two")]
    TwoIds(&'static str),
}

/// An id a caller sent back.
pub fn parse_id(text: &str) -> Result<SlotId, IdError> {
    let bad = || IdError::BadId(crate::base::log_throttle::printable(text));
    if text.len() != ID_DIGITS || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let hi = u64::from_str_radix(&text[..13], 16).map_err(|_| bad())?;
    let lo = u64::from_str_radix(&text[13..], 16).map_err(|_| bad())?;
    if (hi, lo) == (0, 0) {
        return Err(bad());
    }
    Ok((hi, lo))
}
