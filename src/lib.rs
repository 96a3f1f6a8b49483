//! tollgate: an Envoy-compatible gRPC rate-limit decision service.
//!
//! The folders are layers, listed here bottom-up: each imports only the ones above it in this
//! list (`tests/server/layout.rs` holds the table), and [`cli`] is imported by `main.rs` alone.
//! A request flows one way: [`serve`] reads it off the wire, [`service`] validates, plans
//! ([`plan`]) against the current [`config`], lets a [`store`] decide atomically
//! ([`algorithm`]), and answers; what happened is reported once, through [`telemetry`].

pub mod pb;

pub mod admin;
pub mod algorithm;
pub mod base;
pub mod cli;
pub mod config;
pub mod limit;
pub mod plan;
pub mod serve;
pub mod service;
pub mod store;
pub mod telemetry;
