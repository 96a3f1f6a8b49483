//! Test support shared by every integration test binary: real servers and clients
//! ([`server`]), real Redis processes ([`redis`]), the behaviour kit that runs one suite over
//! every store ([`kit`]), a real Envoy and a backend behind it ([`envoy`]), children that
//! die with the test binary ([`process`]), and an xDS control plane ([`xds`]).
#![allow(dead_code)]

pub mod binary;
pub mod envoy;
pub mod kit;
pub mod pki;
pub mod process;
pub mod redis;
pub mod server;
pub mod xds;
