//! What can go wrong with a region's part in global limits.

/// A refill task's failure (it tries again next period) or a region that cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum RegionalError {
    #[error("Redis: {0}")]
    Redis(String),
    #[error("the authority's state is unreadable: {0}")]
    State(String),
    #[error("home's authority stayed busy (held by other regions' asks, or written in between) through {0} tries")]
    Busy(usize),
    #[error("--region-redis names this instance's region '{0}': its Redis is --redis-url")]
    OwnRegion(String),
    #[error("--region-redis {name}: {source}")]
    Connect {
        name: String,
        #[source]
        source: crate::store::redis::error::ConnectError,
    },
    #[error("a region is already set")]
    AlreadySet,
    #[error("no Redis for home region '{0}' (--region-redis {0}=URL)")]
    NoHome(String),
}
