//! `tollgate.slots.v1.Slots`: acquire, release and renew concurrency slots, for callers that
//! are not Envoy. An acquire is a `ShouldRateLimit` call whose answer carries the slot id; a
//! release or renew names the id (`service::slots` has the id's format).

use std::sync::Arc;

use prost_types::value::Kind;

use crate::algorithm::rule::Mode;
use crate::base::clock::{Clock, SystemClock};
use crate::pb::rls::RateLimitRequest;
use crate::pb::tollgate::slots::v1 as pb;
use crate::serve::grpc::deadline_of;
use crate::service::error::CallError;
use crate::service::slots::{parse_id, SLOT_KEY, SLOT_LEASE_KEY};
use crate::service::RateLimiter;
use crate::store::Store;

/// The gRPC service over one limiter.
pub struct SlotsService<S> {
    limiter: Arc<RateLimiter<S>>,
}

impl<S> SlotsService<S> {
    pub fn new(limiter: Arc<RateLimiter<S>>) -> SlotsService<S> {
        SlotsService { limiter }
    }
}

fn now_ms() -> u64 {
    SystemClock.now_us() / 1000
}

#[tonic::async_trait]
impl<S: Store> pb::slots_server::Slots for SlotsService<S> {
    async fn acquire(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<pb::AcquireResponse>, tonic::Status> {
        let started = now_ms();
        let deadline = deadline_of(request.metadata());
        let decision = self
            .limiter
            .should_rate_limit_by(request.get_ref(), deadline)
            .await
            .map_err(tonic::Status::from)?;
        let field = |key: &str| {
            decision
                .dynamic_metadata
                .as_ref()
                .and_then(|m| m.fields.get(key))
                .and_then(|v| v.kind.clone())
        };
        let slot_id = match field(SLOT_KEY) {
            Some(Kind::StringValue(s)) => s,
            _ => String::new(),
        };
        let expires_at_unix_ms = match field(SLOT_LEASE_KEY) {
            Some(Kind::NumberValue(ms)) if !slot_id.is_empty() => started + ms as u64,
            _ => 0,
        };
        Ok(tonic::Response::new(pb::AcquireResponse {
            decision: Some(decision),
            slot_id,
            expires_at_unix_ms,
        }))
    }

    async fn release(
        &self,
        request: tonic::Request<pb::SlotRequest>,
    ) -> Result<tonic::Response<pb::SlotResponse>, tonic::Status> {
        let deadline = deadline_of(request.metadata());
        self.slots(request.into_inner(), Mode::Release, deadline)
            .await
    }

    async fn renew(
        &self,
        request: tonic::Request<pb::SlotRequest>,
    ) -> Result<tonic::Response<pb::SlotResponse>, tonic::Status> {
        let deadline = deadline_of(request.metadata());
        self.slots(request.into_inner(), Mode::Renew, deadline)
            .await
    }
}

impl<S: Store> SlotsService<S> {
    async fn slots(
        &self,
        r: pb::SlotRequest,
        mode: Mode,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<tonic::Response<pb::SlotResponse>, tonic::Status> {
        let id = parse_id(&r.slot_id).map_err(|e| CallError::Invalid(e.into()))?;
        let req = RateLimitRequest {
            domain: r.domain,
            descriptors: r.descriptors,
            hits_addend: 0,
        };
        let started = now_ms();
        let done = self.limiter.slots(&req, id, mode, deadline).await?;
        Ok(tonic::Response::new(pb::SlotResponse {
            limits: done.limits,
            expires_at_unix_ms: done.hold_us.map_or(0, |us| started + us / 1000),
        }))
    }
}
