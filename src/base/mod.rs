//! What every layer may use and which knows nothing of rate limiting: time as an input,
//! durations, graceful shutdown, PEM files, throttled and printable log lines, the version. Imports nothing
//! of the crate.

pub mod clock;
pub mod duration;
pub mod log_throttle;
pub mod pairs;
pub mod pem;
pub mod shutdown;
pub mod version;
