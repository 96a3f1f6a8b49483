//! What tollgate's metrics count by: how a request ended ([`RequestCode`]), what a limit
//! answered ([`LimitResult`]) and which store operation took how long ([`StoreOp`]), each
//! with the label value it is exposed under.

/// How a request ended, as `tollgate_requests_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestCode {
    Ok,
    OverLimit,
    /// Rejected as INVALID_ARGUMENT.
    Invalid,
    /// Answered with UNAVAILABLE (the store failed, policy `error`).
    Unavailable,
    /// Refused with RESOURCE_EXHAUSTED: `--max-in-flight` decisions were already running.
    Overloaded,
    /// Answered OK without a decision: `--disabled`, or the domain's `disabled: true`.
    Disabled,
}

impl RequestCode {
    pub(super) const ALL: [RequestCode; 6] = [
        RequestCode::Ok,
        RequestCode::OverLimit,
        RequestCode::Invalid,
        RequestCode::Unavailable,
        RequestCode::Overloaded,
        RequestCode::Disabled,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            RequestCode::Ok => "OK",
            RequestCode::OverLimit => "OVER_LIMIT",
            RequestCode::Invalid => "INVALID",
            RequestCode::Unavailable => "UNAVAILABLE",
            RequestCode::Overloaded => "RESOURCE_EXHAUSTED",
            RequestCode::Disabled => "DISABLED",
        }
    }
}

/// What one limit answered for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitResult {
    OverLimit,
    NearLimit,
    WithinLimit,
    Shadow,
}

impl LimitResult {
    pub(super) const ALL: [LimitResult; 4] = [
        LimitResult::OverLimit,
        LimitResult::NearLimit,
        LimitResult::WithinLimit,
        LimitResult::Shadow,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            LimitResult::OverLimit => "over_limit",
            LimitResult::NearLimit => "near_limit",
            LimitResult::WithinLimit => "within_limit",
            LimitResult::Shadow => "shadow",
        }
    }

    /// The result of a limit that had room (`allowed`) or not, in shadow mode or not, with
    /// `used` of `capacity` after the request.
    pub fn of(allowed: bool, shadow: bool, used: u64, capacity: u64) -> LimitResult {
        match (allowed, shadow) {
            (false, true) => LimitResult::Shadow,
            (false, false) => LimitResult::OverLimit,
            (true, _) if used > capacity * 4 / 5 => LimitResult::NearLimit,
            (true, _) => LimitResult::WithinLimit,
        }
    }
}

/// Which Redis operation a duration measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Decide,
    Refund,
    Probe,
}

impl StoreOp {
    pub(super) fn label(self) -> &'static str {
        match self {
            StoreOp::Decide => "decide",
            StoreOp::Refund => "refund",
            StoreOp::Probe => "probe",
        }
    }
}

/// Why the store could not decide, as `tollgate_store_failures_total` names it (and the log
/// line's `cause`, `/readyz`'s and the trace span's `error.type`).
pub const FAILURE_CAUSES: [&str; 10] = [
    "timeout",
    "refused",
    "reset",
    "tls",
    "auth",
    "dns",
    "io",
    "script",
    "not_run",
    "not_replicated",
];

/// The causes that were all `connection` before they had names of their own.
pub const CONNECTION_CAUSES: [&str; 6] = ["refused", "reset", "tls", "auth", "dns", "io"];

/// Their old name, still counted (the sum of [`CONNECTION_CAUSES`]) until the next release,
/// so alerts on it keep working; sums over `cause` leave it out.
pub const OLD_CONNECTION_CAUSE: &str = "connection";
