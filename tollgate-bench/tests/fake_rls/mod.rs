//! A stand-in RLS server on a real loopback socket, shared by the end-to-end tests.
//!
//! Key `k` (the first descriptor entry's value) is answered OK when even, OVER_LIMIT when
//! odd, and RESOURCE_EXHAUSTED (a gRPC error, trailers-only) when it ends in 9; every answer takes `delay`. The server counts
//! what it answered, so a test can compare the report with the server's own numbers
//! instead of with the clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};

/// What the fake server answered, by answer.
#[derive(Debug, Default)]
pub struct Answered {
    pub ok: AtomicU64,
    pub over_limit: AtomicU64,
    pub exhausted: AtomicU64,
    /// The largest key number any request carried.
    pub max_key: AtomicU64,
}

impl Answered {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }

    pub fn total(&self) -> u64 {
        Self::get(&self.ok) + Self::get(&self.over_limit) + Self::get(&self.exhausted)
    }
}

struct FakeRls {
    delay: Duration,
    answered: Arc<Answered>,
}

#[tonic::async_trait]
impl RateLimitService for FakeRls {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        tokio::time::sleep(self.delay).await;
        let req = request.into_inner();
        let key: u64 = req
            .descriptors
            .first()
            .and_then(|d| d.entries.first())
            .and_then(|e| e.value.parse().ok())
            .ok_or_else(|| tonic::Status::invalid_argument("no key"))?;
        let a = &self.answered;
        a.max_key.fetch_max(key, Ordering::SeqCst);
        if key % 10 == 9 {
            a.exhausted.fetch_add(1, Ordering::SeqCst);
            return Err(tonic::Status::resource_exhausted("down"));
        }
        let code = if key.is_multiple_of(2) {
            a.ok.fetch_add(1, Ordering::SeqCst);
            Code::Ok
        } else {
            a.over_limit.fetch_add(1, Ordering::SeqCst);
            Code::OverLimit
        };
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: code as i32,
            ..Default::default()
        }))
    }
}

/// Starts a fake server on the current runtime; returns its URL and its counts.
pub async fn start(delay: Duration) -> (String, Arc<Answered>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener
        .local_addr()
        .expect("a bound socket has an address");
    let answered = Arc::new(Answered::default());
    let svc = RateLimitServiceServer::new(FakeRls {
        delay,
        answered: answered.clone(),
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("http://{addr}"), answered)
}
