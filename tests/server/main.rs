//! The server from outside: real gRPC and HTTP over sockets, the binary's CLI, config files
//! and their errors, reload, shutdown.

#[path = "../support/mod.rs"]
mod support;

mod budgets;
mod busy_host;
mod config_validation;
mod dropin;
mod envoy_gateway_configs;
mod envoyproxy_stats;
mod fallback;
mod flood_bounds;
mod floods;
mod global_budgets;
mod global_regions;
mod grpc;
mod home_moves;
mod imports;
mod layout;
mod lengths;
mod metrics;
mod operator;
mod readme;
mod redis_tls;
mod statsd;
mod thp;
mod three_regions;
mod tracing;
mod version;
mod wire;
mod xds;
