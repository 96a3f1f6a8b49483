//! The gRPC listener at the HTTP/2 level, as a broken or hostile client meets it: raw HTTP/2
//! requests (the `h2` crate, no gRPC library) with bodies no gRPC client would send. Each gets
//! a gRPC status, and the same connection keeps answering well-formed calls.

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use http::{HeaderMap, Request};
use prost::Message;
use tokio::net::TcpStream;

use crate::support::server::*;
use tollgate::pb::rls::RateLimitResponse;

const CONFIG: &str = "\
domain: wire
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
";

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// What came back for one request: the HTTP status, the gRPC status (from the trailers, or
/// from the headers of a trailers-only answer), and the body.
struct Answer {
    http: u16,
    grpc_status: Option<String>,
    body: Bytes,
}

async fn connect(server: &TestServer) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(server.running.grpc_addr)
        .await
        .expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

async fn post(send: &mut SendRequest<Bytes>, path: &str, body: Bytes) -> Answer {
    let req = Request::post(path)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let mut ready = send.clone().ready().await.expect("connection ready");
    let (response, mut stream) = ready.send_request(req, false).expect("send headers");
    // Larger bodies go out as the peer's flow control allows, until the server has answered
    // (and reset the stream) or everything is sent.
    let mut rest = body;
    while !rest.is_empty() {
        stream.reserve_capacity(rest.len());
        let Some(Ok(granted)) = std::future::poll_fn(|cx| stream.poll_capacity(cx)).await else {
            break;
        };
        let chunk = rest.split_to(granted.min(rest.len()));
        if stream.send_data(chunk, false).is_err() {
            break;
        }
    }
    let _ = stream.send_data(Bytes::new(), true);
    let response = bounded("response", response).await.expect("response");
    let http = response.status().as_u16();
    let from_headers = grpc_status(response.headers());
    let mut recv = response.into_body();
    let mut body = BytesMut::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.expect("body chunk");
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.put(chunk);
    }
    let trailers = recv.trailers().await.expect("trailers");
    Answer {
        http,
        grpc_status: from_headers.or_else(|| trailers.as_ref().and_then(grpc_status)),
        body: body.freeze(),
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<String> {
    headers
        .get("grpc-status")
        .map(|v| v.to_str().expect("ascii").to_string())
}

/// `message` framed as one uncompressed gRPC message.
fn framed(message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.put_u8(0);
    b.put_u32(message.len() as u32);
    b.put_slice(message);
    b.freeze()
}

fn well_formed() -> Bytes {
    framed(&req("wire", &[&[("k", "v")]]).encode_to_vec())
}

fn code(c: tonic::Code) -> Option<String> {
    Some((c as i32).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_bodies_get_a_grpc_status_and_the_connection_keeps_serving() {
    let server = start(CONFIG, TestOptions::default()).await;
    let mut conn = connect(&server).await;

    let ok = post(&mut conn, PATH, well_formed()).await;
    assert_eq!(
        (ok.http, ok.grpc_status.clone()),
        (200, code(tonic::Code::Ok))
    );
    let answer = RateLimitResponse::decode(&ok.body[5..]).expect("a RateLimitResponse");
    assert_eq!(answer.overall_code, OK);

    let not_protobuf = post(&mut conn, PATH, framed(&[0xff; 16])).await;
    assert_eq!(not_protobuf.grpc_status, code(tonic::Code::Internal));

    let mut compressed = BytesMut::from(&well_formed()[..]);
    compressed[0] = 1;
    let compressed = post(&mut conn, PATH, compressed.freeze()).await;
    assert_eq!(compressed.grpc_status, code(tonic::Code::Unimplemented));

    let mut short = BytesMut::from(&well_formed()[..]);
    short.truncate(short.len() - 1);
    let short = post(&mut conn, PATH, short.freeze()).await;
    assert_eq!(short.grpc_status, code(tonic::Code::Internal));

    let two_messages = [well_formed(), well_formed()].concat();
    let two = post(&mut conn, PATH, Bytes::from(two_messages)).await;
    assert_eq!(two.grpc_status, code(tonic::Code::Internal));

    let empty = post(&mut conn, PATH, Bytes::new()).await;
    assert_eq!(empty.grpc_status, code(tonic::Code::Internal));

    let unknown = post(&mut conn, "/no.Such/Method", well_formed()).await;
    assert_eq!(unknown.grpc_status, code(tonic::Code::Unimplemented));

    // Bad input charged nothing: the limit of 2 still has one left after the first call.
    let second = post(&mut conn, PATH, well_formed()).await;
    let second = RateLimitResponse::decode(&second.body[5..]).expect("a RateLimitResponse");
    assert_eq!(second.overall_code, OK);
    let third = post(&mut conn, PATH, well_formed()).await;
    let third = RateLimitResponse::decode(&third.body[5..]).expect("a RateLimitResponse");
    assert_eq!(third.overall_code, OVER_LIMIT);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_4_mib_is_refused_without_reading_it_all() {
    let server = start(CONFIG, TestOptions::default()).await;
    let mut conn = connect(&server).await;
    // A valid prefix announcing 5 MiB, then 5 MiB of it.
    let big = framed(&vec![0u8; 5 * 1024 * 1024]);
    let answer = post(&mut conn, PATH, big).await;
    assert_eq!(answer.grpc_status, code(tonic::Code::ResourceExhausted));
    let ok = post(&mut conn, PATH, well_formed()).await;
    assert_eq!(ok.grpc_status, code(tonic::Code::Ok));
    server.stop().await;
}

/// A call whose body never ends (headers and part of a message, no END_STREAM) is answered
/// `DEADLINE_EXCEEDED` when the caller's deadline passes, instead of holding its buffer for
/// as long as the connection lives; the connection keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_ends_is_answered_at_the_deadline() {
    let server = start(CONFIG, TestOptions::default()).await;
    let mut conn = connect(&server).await;
    let req = Request::post(PATH)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "300m")
        .body(())
        .expect("request");
    let mut ready = conn.clone().ready().await.expect("connection ready");
    let (response, mut stream) = ready.send_request(req, false).expect("send headers");
    let message = well_formed();
    stream
        .send_data(message.slice(..message.len() - 2), false)
        .expect("part of the message");
    let started = std::time::Instant::now();
    let response = bounded("response", response).await.expect("response");
    let waited = started.elapsed();
    let status = grpc_status(response.headers());
    let status = match status {
        Some(s) => Some(s),
        None => {
            let mut body = response.into_body();
            while body.data().await.is_some() {}
            body.trailers()
                .await
                .expect("trailers")
                .as_ref()
                .and_then(grpc_status)
        }
    };
    assert_eq!(status, code(tonic::Code::DeadlineExceeded));
    assert!(
        waited >= std::time::Duration::from_millis(250)
            && waited < std::time::Duration::from_secs(3),
        "answered after {waited:?}"
    );
    let ok = post(&mut conn, PATH, well_formed()).await;
    assert_eq!(ok.grpc_status, code(tonic::Code::Ok));
    server.stop().await;
}
