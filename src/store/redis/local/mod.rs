//! What this instance keeps between calls: the units of leased shared limits it holds
//! (`lease.rs`, decided by `leased.rs`) and the over-limit cache (`local_cache.rs`).

pub(super) mod lease;
pub(super) mod leased;
pub mod local_cache;
