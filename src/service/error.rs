//! Why a call failed, as a type: the gRPC listener maps each cause to a status, the HTTP
//! `/json` endpoint to a code, and the message is meant for the caller.

use std::fmt;

use crate::plan::PlanError;
use crate::service::slots::IdError;
use crate::service::validate::ValidationError;
use crate::store::error::StoreError;

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The request is malformed or out of bounds: the caller's fault (`INVALID_ARGUMENT`).
    #[error(transparent)]
    Invalid(#[from] InvalidRequest),
    /// More decisions in flight than `--max-in-flight` (`RESOURCE_EXHAUSTED`).
    #[error("{0} decisions are already in flight (--max-in-flight)")]
    Overloaded(usize),
    /// The store could not decide, and the failure policy answers with an error
    /// (`UNAVAILABLE`).
    #[error("rate limit store unavailable: {0}")]
    Unavailable(StoreDown),
    /// The caller's deadline passed before a decision (`DEADLINE_EXCEEDED`).
    #[error("the caller's grpc-timeout passed before a decision")]
    DeadlineExceeded,
}

/// What is wrong with a request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InvalidRequest {
    /// Outside the request bounds (`src/service/validate.rs`).
    #[error(transparent)]
    Bounds(#[from] ValidationError),
    /// Against the domain's config (`max_hits`, a limit override).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// An id (a release's, a settle's) that cannot be one.
    #[error(transparent)]
    Id(#[from] IdError),
}

/// A store failure as the caller hears it: the decision's error, and the store's standing
/// reason (what readiness reports) when it says more.
#[derive(Debug, Clone)]
pub struct StoreDown {
    pub error: StoreError,
    pub reason: Option<StoreError>,
}

impl fmt::Display for StoreDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Some(reason) if reason.to_string() != self.error.to_string() => {
                write!(f, "{} ({reason})", self.error)
            }
            _ => write!(f, "{}", self.error),
        }
    }
}

impl CallError {
    /// A store failure without a standing reason.
    pub fn store(error: StoreError) -> CallError {
        CallError::Unavailable(StoreDown {
            error,
            reason: None,
        })
    }
}

impl From<CallError> for tonic::Status {
    fn from(e: CallError) -> tonic::Status {
        let message = e.to_string();
        match e {
            CallError::Invalid(_) => tonic::Status::invalid_argument(message),
            CallError::Unavailable(_) => tonic::Status::unavailable(message),
            CallError::Overloaded(_) => tonic::Status::resource_exhausted(message),
            CallError::DeadlineExceeded => tonic::Status::deadline_exceeded(message),
        }
    }
}
