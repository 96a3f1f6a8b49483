//! tollgate: an Envoy-compatible gRPC rate-limit decision service.
//!
//! A request flows one way: [`service`] validates ([`validate`]), plans against the current
//! [`config`] ([`plan`]), lets a [`store`] decide atomically ([`algorithm`]), and maps the
//! [`decision`] back to Envoy's response.

pub mod admin;
pub mod admin_client;
pub mod admin_token;
pub mod algorithm;
pub mod calendar;
pub mod cli;
pub mod clock;
pub mod compat;
pub mod config;
pub mod counters;
pub mod decision;
pub mod duration;
pub mod grpc;
pub mod json;
pub mod latency;
pub mod limit;
pub mod log_throttle;
pub mod metrics;
pub mod pb;
pub mod pem;
pub mod plan;
pub mod query;
pub mod respond;
pub mod server;
pub mod service;
pub mod serving;
pub mod settings;
pub mod shutdown;
pub mod slots;
pub mod stats;
pub mod status_page;
pub mod store;
pub mod telemetry;
pub mod top;
pub mod top_page;
pub mod transport;
pub mod validate;
