//! `tollgate.reservations.v1.Reservations`: reserve and settle, for callers that are not Envoy.
//! A reserve is a `ShouldRateLimit` call whose descriptors each carry the reservation mark
//! (`service::marked`), so it is decided exactly as Envoy's is; its answer carries the id.

use std::sync::Arc;

use prost_types::value::Kind;

use crate::pb::common::rate_limit_descriptor::Entry;
use crate::pb::rls::RateLimitRequest;
use crate::pb::tollgate::reservations::v1 as pb;
use crate::serve::grpc::deadline_of;
use crate::service::error::CallError;
use crate::service::marked::{RESERVATION_KEY, RESERVE_KEY};
use crate::service::slots::parse_id;
use crate::service::RateLimiter;
use crate::store::Store;

/// The gRPC service over one limiter.
pub struct ReservationsService<S> {
    limiter: Arc<RateLimiter<S>>,
}

impl<S> ReservationsService<S> {
    pub fn new(limiter: Arc<RateLimiter<S>>) -> ReservationsService<S> {
        ReservationsService { limiter }
    }
}

#[tonic::async_trait]
impl<S: Store> pb::reservations_server::Reservations for ReservationsService<S> {
    async fn reserve(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<pb::ReserveResponse>, tonic::Status> {
        let deadline = deadline_of(request.metadata());
        let mut req = request.into_inner();
        for d in &mut req.descriptors {
            d.entries.push(Entry {
                key: RESERVE_KEY.into(),
                value: "estimate".into(),
            });
        }
        let decision = self
            .limiter
            .should_rate_limit_by(&req, deadline)
            .await
            .map_err(tonic::Status::from)?;
        let reservation_id = decision
            .dynamic_metadata
            .as_ref()
            .and_then(|m| m.fields.get(RESERVATION_KEY))
            .and_then(|v| match &v.kind {
                Some(Kind::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        Ok(tonic::Response::new(pb::ReserveResponse {
            decision: Some(decision),
            reservation_id,
        }))
    }

    async fn settle(
        &self,
        request: tonic::Request<pb::SettleRequest>,
    ) -> Result<tonic::Response<pb::SettleResponse>, tonic::Status> {
        let deadline = deadline_of(request.metadata());
        let r = request.into_inner();
        let id = parse_id(&r.reservation_id).map_err(|e| CallError::Invalid(e.into()))?;
        let req = RateLimitRequest {
            domain: r.domain,
            descriptors: r.descriptors,
            hits_addend: 0,
        };
        let done = self.limiter.settle(&req, id, deadline).await?;
        Ok(tonic::Response::new(pb::SettleResponse {
            limits: done.limits,
        }))
    }
}
