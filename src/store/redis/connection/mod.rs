//! Reaching Redis: the URL forms and TLS, fred's clients (one per serving thread), readiness
//! and topology (`health.rs`: probes, failovers, script loading), the marker that tells a
//! Redis came back empty, and following a hash slot that migrates.

pub(super) mod client;
pub(super) mod health;
pub(super) mod marker;
pub(super) mod migration;
pub(super) mod tls;
pub mod url;
