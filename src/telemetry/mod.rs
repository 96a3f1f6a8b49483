//! What the service reports about itself: tollgate's Prometheus metrics, envoyproxy/ratelimit's
//! statistics (and their statsd sink), logs and traces, the store's latency window and who is
//! being limited. Below the domain types: it knows descriptors as protobuf entries and limits
//! as labels, never a `Limit` or a plan; `service::observe` is where a decision reaches it.
//! Imports `base` and `pb`.

pub mod counted;
pub mod global_metrics;
pub mod latency;
pub mod logging;
pub mod metrics;
pub mod stats;
pub mod top;
