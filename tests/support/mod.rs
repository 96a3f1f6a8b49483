//! Test support shared by every integration test binary: real servers and clients
//! ([`server`]), real Redis processes ([`redis`]), the behaviour kit that runs one suite over
//! every store ([`kit`]), a real Envoy and a backend behind it ([`envoy`]), children that
//! die with the test binary ([`process`]), an xDS control plane ([`xds`]) and a server made far
//! away by a delaying proxy ([`delay`]).

// Every test binary compiles all of this and uses a part of it (the Envoy tests use `envoy`,
// the server tests `pki` and `binary`, …): what one binary leaves unused another uses. A helper
// that no binary uses is deleted (build each test target without this line to find one).
#![allow(dead_code)]

pub mod binary;
pub mod delay;
pub mod envoy;
pub mod kit;
pub mod netcut;
pub mod pki;
pub mod process;
pub mod redis;
pub mod server;
pub mod xds;
