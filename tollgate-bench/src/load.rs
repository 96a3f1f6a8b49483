//! What both load shapes share: the connections, one call, and the state every call reads.
//!
//! [`crate::closed`] and [`crate::open`] differ only in when they send; both build each
//! request here, at send time, from the template and a freshly picked key number.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, TE};
use http::{Request, Uri};
use prost::Message;
use tokio::net::TcpStream;
use tonic::Code;

use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};

use crate::keys::{KeyChoice, SplitMix64};
use crate::progress::Progress;
use crate::schedule::Window;
use crate::tally::{status_name, Outcome, TIMEOUT};
use crate::template::RequestTemplate;

/// One HTTP/2 connection, shared by every worker that sends on it. Calls go straight to `h2`
/// (no tower buffer, no per-call tasks): the generator shares the box with the server it
/// measures, and every CPU cycle it spends is one the server does not get, and shows up in
/// the latency it reports.
#[derive(Debug, Clone)]
pub struct Client {
    send: SendRequest<Bytes>,
    uri: Uri,
    /// `grpc-timeout` sent with every call (`--grpc-timeout`), in gRPC's wire form.
    grpc_timeout: Option<String>,
}

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

/// gRPC's path of `ShouldRateLimit`.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Sends `req` and waits for the answer, at most `timeout`.
pub async fn call(client: &mut Client, req: RateLimitRequest, timeout: Duration) -> Outcome {
    match tokio::time::timeout(timeout, client.call(req)).await {
        Err(_) => Outcome::Error(TIMEOUT),
        Ok(outcome) => outcome,
    }
}

impl Client {
    /// One unary gRPC call: headers, one length-prefixed message, then the answer's message
    /// and its `grpc-status` (in the trailers, or in the headers of a trailers-only answer).
    /// A broken connection or stream counts as `UNAVAILABLE`, as a gRPC client reports it.
    async fn call(&mut self, req: RateLimitRequest) -> Outcome {
        let unavailable = Outcome::Error(status_name(Code::Unavailable));
        let len = req.encoded_len();
        let mut body = BytesMut::with_capacity(5 + len);
        body.put_u8(0);
        body.put_u32(len as u32);
        if req.encode(&mut body).is_err() {
            return Outcome::Error(status_name(Code::Internal));
        }
        let Ok(mut send) = self.send.clone().ready().await else {
            return unavailable;
        };
        let mut head = Request::post(self.uri.clone())
            .header(CONTENT_TYPE, "application/grpc")
            .header(TE, "trailers");
        if let Some(deadline) = &self.grpc_timeout {
            head = head.header("grpc-timeout", deadline.as_str());
        }
        let head = match head.body(()) {
            Ok(head) => head,
            Err(_) => return Outcome::Error(status_name(Code::Internal)),
        };
        let Ok((answer, mut stream)) = send.send_request(head, false) else {
            return unavailable;
        };
        if stream.send_data(body.freeze(), true).is_err() {
            return unavailable;
        }
        let Ok(answer) = answer.await else {
            return unavailable;
        };
        if let Some(code) = grpc_status(answer.headers()) {
            if code != Code::Ok {
                return Outcome::Error(status_name(code));
            }
        }
        let mut body = answer.into_body();
        let mut message = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let Ok(chunk) = chunk else { return unavailable };
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        let code = match body.trailers().await {
            Ok(Some(trailers)) => grpc_status(&trailers),
            Ok(None) => None,
            Err(_) => return unavailable,
        };
        match code {
            Some(Code::Ok) => {}
            Some(code) => return Outcome::Error(status_name(code)),
            None if message.is_empty() => return Outcome::Error(status_name(Code::Unknown)),
            None => {}
        }
        if message.len() < 5 || message[0] != 0 {
            return Outcome::Error(status_name(Code::Internal));
        }
        match RateLimitResponse::decode(&message[5..]) {
            Ok(resp) => Outcome::of_code(resp.overall_code),
            Err(_) => Outcome::Error(status_name(Code::Internal)),
        }
    }
}

/// The `grpc-status` in `headers`, if there is one.
fn grpc_status(headers: &http::HeaderMap) -> Option<Code> {
    let value = headers.get("grpc-status")?;
    let n: i32 = value.to_str().ok()?.parse().ok()?;
    Some(Code::from(n))
}

/// `connections` HTTP/2 connections to `addr` (an `http://host:port` URL), each driven by a
/// task of its own.
pub async fn connect(
    addr: &str,
    connections: usize,
    grpc_timeout: Option<Duration>,
) -> anyhow::Result<Vec<Client>> {
    // gRPC's wire form of a deadline: up to 8 digits and a unit (`m` for milliseconds).
    let grpc_timeout = grpc_timeout.map(|d| format!("{}m", d.as_millis().clamp(1, 99_999_999)));
    let base: Uri = addr
        .parse()
        .with_context(|| format!("--addr '{addr}' is not a URL"))?;
    if base.scheme_str() != Some("http") {
        anyhow::bail!("--addr '{addr}': only http://host:port is supported (plaintext HTTP/2)");
    }
    let authority = base
        .authority()
        .with_context(|| format!("--addr '{addr}' names no host and port"))?
        .clone();
    let target = if authority.port().is_some() {
        authority.to_string()
    } else {
        format!("{}:80", authority.host())
    };
    let uri = Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(PATH)
        .build()
        .with_context(|| format!("--addr '{addr}' is not a URL"))?;
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&target))
            .await
            .map_err(|_| anyhow::anyhow!("connect timed out"))
            .and_then(|r| r.map_err(anyhow::Error::from))
            .with_context(|| format!("cannot connect to {addr}"))?;
        tcp.set_nodelay(true)
            .with_context(|| format!("cannot connect to {addr}"))?;
        let (send, connection) = h2::client::handshake(tcp)
            .await
            .with_context(|| format!("cannot connect to {addr}: HTTP/2 handshake"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        clients.push(Client {
            send,
            uri: uri.clone(),
            grpc_timeout: grpc_timeout.clone(),
        });
    }
    Ok(clients)
}
