//! Where counters live. A store executes a plan's charges atomically (all-or-nothing, see
//! [`crate::algorithm::decide_batch`]) and answers an [`Outcome`] per charge.

mod local_cache;
pub mod memory;
pub mod redis;

use std::future::Future;

pub use crate::algorithm::Outcome;
use crate::plan::Charge;

/// Why a store could not decide. Maps to the configured failure policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

/// How a batch is charged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyMode {
    /// envoyproxy/ratelimit's behaviour: every charge lands, even on a denied request.
    pub count_rejected: bool,
}

pub trait Store: Send + Sync + 'static {
    /// Decides and charges `charges` as one request. Outcomes are index-aligned with charges.
    fn apply(
        &self,
        charges: &[Charge<'_>],
        mode: ApplyMode,
    ) -> impl Future<Output = Result<Vec<Outcome>, StoreError>> + Send;

    /// Whether the store can take requests now (readiness).
    fn is_ready(&self) -> bool {
        true
    }

    /// Periodic upkeep (reclaiming expired counters, probing connections).
    fn maintain(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
