//! How the service answers, beyond the config: switches that `serve` flags set and the
//! service reads. No CLI types here; [`crate::cli`] maps flags onto these.

use crate::service::validate::Bounds;

/// Behaviour switches of the service.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Charge every descriptor on every request, as envoyproxy/ratelimit does.
    pub count_rejected: bool,
    /// Statuses report the truth, but the overall code is always OK.
    pub global_shadow: bool,
    /// Add rate limit headers to responses, with these names.
    pub headers: Option<HeaderNames>,
    /// Add dynamic metadata to responses.
    pub dynamic_metadata: bool,
    pub bounds: Bounds,
    pub failure_mode: FailureMode,
    /// `--failure-mode local`: each limit becomes `max(1, limit / share)` (the replica count).
    pub local_fallback_share: u32,
    /// Also put the store-failure marker into client-visible response headers.
    pub store_failure_header: bool,
    /// Most decisions in flight at once; more are refused at once (`RESOURCE_EXHAUSTED`).
    pub max_in_flight: usize,
    /// Most answers held at once (`max_wait`, see `service::hold`); a request that finds them
    /// all taken is decided without waiting.
    pub max_held: usize,
    /// The kill switch: every request is answered OK without touching the store.
    pub disabled: bool,
    /// Most bytes a memory store's counters hold (`--max-store-bytes`): the store itself, or
    /// `--failure-mode local`'s stand-in for Redis.
    pub max_store_bytes: usize,
    /// Descriptor keys whose value pairs a request's two calls into a reservation and its
    /// settle (`--reservation-pair-keys`, see `service::paired`); empty: none.
    pub reservation_pair_keys: Vec<String>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            count_rejected: false,
            global_shadow: false,
            headers: None,
            dynamic_metadata: false,
            bounds: Bounds::default(),
            failure_mode: FailureMode::default(),
            local_fallback_share: 1,
            store_failure_header: false,
            max_in_flight: 4096,
            max_held: crate::service::hold::DEFAULT_MAX_HELD,
            disabled: false,
            max_store_bytes: crate::store::memory::DEFAULT_MAX_BYTES,
            reservation_pair_keys: Vec::new(),
        }
    }
}

/// Header names for `--response-headers` (IETF draft names, as envoyproxy/ratelimit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
    pub retry_after: String,
}

impl Default for HeaderNames {
    fn default() -> HeaderNames {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
            retry_after: "Retry-After".into(),
        }
    }
}

/// What to answer when the store cannot decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// gRPC UNAVAILABLE: Envoy's `failure_mode_deny` decides.
    #[default]
    Error,
    /// OK for every descriptor.
    Allow,
    /// OVER_LIMIT for every limited descriptor.
    Deny,
    /// Decide against an in-process limiter with the same config, each limit shared out
    /// among the replicas (`--local-fallback-share`), until the store is ready again.
    Local,
}

impl FailureMode {
    pub fn name(self) -> &'static str {
        match self {
            FailureMode::Error => "error",
            FailureMode::Allow => "allow",
            FailureMode::Deny => "deny",
            FailureMode::Local => "local",
        }
    }
}
