//! What both load shapes share: the connections, one call, and the state every call reads.
//!
//! [`crate::closed`] and [`crate::open`] differ only in when they send; both build each
//! request here, at send time, from the template and a freshly picked key number.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tonic::transport::{Channel, Endpoint};

use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitRequest;

use crate::keys::{KeyChoice, SplitMix64};
use crate::progress::Progress;
use crate::schedule::Window;
use crate::tally::{status_name, Outcome, TIMEOUT};
use crate::template::RequestTemplate;

/// One gRPC client per HTTP/2 connection.
pub type Client = RateLimitServiceClient<Channel>;

/// What every worker and call shares.
#[derive(Debug)]
pub struct Load {
    pub requests: RequestTemplate,
    pub keys: KeyChoice,
    pub timeout: Duration,
    pub window: Window,
    pub progress: Arc<Progress>,
    /// Seeds the random streams; from the clock, so runs differ.
    seed: u64,
}

impl Load {
    pub fn new(
        requests: RequestTemplate,
        keys: KeyChoice,
        timeout: Duration,
        window: Window,
    ) -> Load {
        Load {
            requests,
            keys,
            timeout,
            window,
            progress: Arc::default(),
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        }
    }

    /// Random stream number `stream`: one per closed-loop worker, one for the scheduler.
    pub fn rng(&self, stream: u64) -> SplitMix64 {
        SplitMix64::new(self.seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    /// The request for the next key `rng` picks, built now.
    pub fn next_request(&self, rng: &mut SplitMix64) -> RateLimitRequest {
        self.requests.request(self.keys.pick(rng))
    }
}

/// Sends `req` and waits for the answer, at most `timeout`.
pub async fn call(client: &mut Client, req: RateLimitRequest, timeout: Duration) -> Outcome {
    match tokio::time::timeout(timeout, client.should_rate_limit(req)).await {
        Err(_) => Outcome::Error(TIMEOUT),
        Ok(Err(status)) => Outcome::Error(status_name(status.code())),
        Ok(Ok(resp)) => Outcome::of_code(resp.get_ref().overall_code),
    }
}

/// One client per HTTP/2 connection: each `connect` opens its own.
pub async fn connect(addr: &str, connections: usize) -> anyhow::Result<Vec<Client>> {
    let endpoint = Endpoint::from_shared(addr.to_string())
        .with_context(|| format!("--addr '{addr}' is not a URL"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5));
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        let channel = endpoint
            .connect()
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        clients.push(RateLimitServiceClient::new(channel));
    }
    Ok(clients)
}
