//! The gRPC face of a [`RateLimiter`]: every call on the gRPC listener, as an HTTP/2 request.
//!
//! `ShouldRateLimit` is served here directly: the body is read (at most [`MAX_MESSAGE`]),
//! unframed and decoded, decided, and the answer goes back as one DATA frame and a
//! `grpc-status: 0` trailer, with nothing else in between. Every other path (`grpc.health.v1`)
//! goes to tonic's router. Measured, the tonic stack around one unary call (routing, tower
//! layers, codec streams) cost more CPU than the decision itself; BENCHMARKS.md has the numbers.
//!
//! What tonic did for the call, this file does the same way: the caller's `grpc-timeout` ends
//! the call (`DEADLINE_EXCEEDED`; no store work once it has passed), a malformed or compressed
//! message is refused with a gRPC status, and a trace continues the caller's `traceparent`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use opentelemetry::context::FutureExt;
use opentelemetry::KeyValue;
use prost::Message;
use tower::ServiceExt;

use crate::pb::rls::{RateLimitRequest, RateLimitResponse};
use crate::service::error::CallError;
use crate::service::validate::{Bounds, ValidationError};
use crate::service::RateLimiter;
use crate::store::Store;
use crate::telemetry::logging;

/// The one method served here.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The largest request message accepted (tonic's default decoding limit).
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// gRPC's length-prefixed framing: a compression flag and a big-endian length.
const PREFIX: usize = 5;

/// Routes the calls of one gRPC listener.
pub struct Calls<S> {
    limiter: Arc<RateLimiter<S>>,
    /// Everything but `ShouldRateLimit` (the health service).
    others: tonic::service::Routes,
}

impl<S> Clone for Calls<S> {
    fn clone(&self) -> Self {
        Calls {
            limiter: self.limiter.clone(),
            others: self.others.clone(),
        }
    }
}

impl<S: Store> Calls<S> {
    pub fn new(limiter: Arc<RateLimiter<S>>, others: tonic::service::Routes) -> Calls<S> {
        Calls { limiter, others }
    }
}

type CallFuture = Pin<Box<dyn Future<Output = Result<Response<CallBody>, hyper::Error>> + Send>>;

impl<S: Store> hyper::service::Service<Request<Incoming>> for Calls<S> {
    type Response = Response<CallBody>;
    type Error = hyper::Error;
    type Future = CallFuture;

    fn call(&self, req: Request<Incoming>) -> CallFuture {
        if req.uri().path() == SHOULD_RATE_LIMIT {
            let limiter = self.limiter.clone();
            Box::pin(async move { Ok(should_rate_limit(&limiter, req).await) })
        } else {
            let others = self.others.clone();
            Box::pin(async move {
                let req = req.map(tonic::body::Body::new);
                // tonic's router answers every path (unknown ones with UNIMPLEMENTED).
                let resp = match others.oneshot(req).await {
                    Ok(resp) => resp,
                    Err(never) => match never {},
                };
                Ok(resp.map(CallBody::Other))
            })
        }
    }
}

/// One `ShouldRateLimit` call, request to answer.
async fn should_rate_limit<S: Store>(
    limiter: &RateLimiter<S>,
    req: Request<Incoming>,
) -> Response<CallBody> {
    let deadline = grpc_timeout(req.headers()).map(|t| tokio::time::Instant::now() + t);
    let span = logging::request_span(req.headers());
    let message =
        match read_in_time(read_message(req.into_body(), limiter.bounds()), deadline).await {
            Ok(m) => m,
            Err(status) => return status.into_http(),
        };
    let decide = limiter.should_rate_limit_by(&message, deadline);
    let decided = match deadline {
        None => traced(decide, &span).await,
        Some(at) => match tokio::time::timeout_at(at, traced(decide, &span)).await {
            Ok(decided) => decided,
            Err(_) => Err(CallError::DeadlineExceeded),
        },
    };
    logging::end(span, || match &decided {
        Ok(_) => vec![KeyValue::new("rpc.grpc.status_code", 0)],
        Err(e) => vec![
            KeyValue::new(
                "rpc.grpc.status_code",
                tonic::Status::from(e.clone()).code() as i64,
            ),
            KeyValue::new("error.type", e.to_string()),
        ],
    });
    match decided {
        Ok(answer) => answer_response(&answer),
        Err(e) => tonic::Status::from(e).into_http(),
    }
}

/// `future` inside the request's span, when there is one.
async fn traced<F: Future>(future: F, span: &Option<opentelemetry::Context>) -> F::Output {
    match span {
        Some(cx) => future.with_context(cx.clone()).await,
        None => future.await,
    }
}

/// A request message must have arrived this long after its headers, when the caller's own
/// deadline is not sooner: a stream that never ends its body holds its buffer until then.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `read` (the request message), given until the caller's deadline or [`READ_TIMEOUT`].
/// No timer is set when the message is already there (the common case: headers and body
/// arrive together).
async fn read_in_time<F>(
    read: F,
    deadline: Option<tokio::time::Instant>,
) -> Result<RateLimitRequest, tonic::Status>
where
    F: Future<Output = Result<RateLimitRequest, tonic::Status>>,
{
    let mut read = std::pin::pin!(read);
    if let Poll::Ready(message) =
        std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await
    {
        return message;
    }
    let cap = tokio::time::Instant::now() + READ_TIMEOUT;
    let by = deadline.map_or(cap, |d| d.min(cap));
    match tokio::time::timeout_at(by, read).await {
        Ok(message) => message,
        Err(_) => Err(tonic::Status::deadline_exceeded(
            "the request message did not arrive before the deadline",
        )),
    }
}

/// Reads and decodes the request message. Its shape is checked against `bounds` before it
/// is decoded, so a message of many tiny descriptors is refused without being built.
async fn read_message(body: Incoming, bounds: &Bounds) -> Result<RateLimitRequest, tonic::Status> {
    let body = Limited::new(body, PREFIX + MAX_MESSAGE)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                tonic::Status::resource_exhausted(format!(
                    "request message larger than {MAX_MESSAGE} bytes"
                ))
            } else {
                tonic::Status::cancelled(format!("reading the request failed: {e}"))
            }
        })?
        .to_bytes();
    let message = unframe(body)?;
    check_counts(&message, bounds).map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
    RateLimitRequest::decode(message)
        .map_err(|e| tonic::Status::internal(format!("failed to decode the request: {e}")))
}

/// Counts a `RateLimitRequest`'s descriptors, and each one's entries, in its encoding: more
/// than `bounds` allow is refused with the words [`crate::service::validate`] would use. Decoded, a
/// 4 MiB message of empty descriptors takes about 60 times its size. A message this walk
/// cannot follow is left to the decoder to refuse.
fn check_counts(message: &[u8], bounds: &Bounds) -> Result<(), ValidationError> {
    let mut descriptors = 0;
    let mut too_many_entries = None;
    let _ = each_field(message, |tag, payload| {
        // RateLimitRequest.descriptors = 2; RateLimitDescriptor.entries = 1.
        if tag == 2 {
            let mut entries = 0;
            let _ = each_field(payload, |tag, _| entries += usize::from(tag == 1));
            if entries > bounds.max_entries && too_many_entries.is_none() {
                too_many_entries = Some((descriptors, entries));
            }
            descriptors += 1;
        }
    });
    if descriptors > bounds.max_descriptors {
        return Err(ValidationError::TooManyDescriptors {
            count: descriptors,
            max: bounds.max_descriptors,
        });
    }
    match too_many_entries {
        Some((descriptor, count)) => Err(ValidationError::TooManyEntries {
            descriptor,
            count,
            max: bounds.max_entries,
        }),
        None => Ok(()),
    }
}

/// Calls `f` with the number and payload of every length-delimited field of a protobuf
/// message (other fields are skipped); `None` where the encoding is broken.
fn each_field(mut buf: &[u8], mut f: impl FnMut(u32, &[u8])) -> Option<()> {
    use prost::encoding::{decode_key, decode_varint, WireType};
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        let skip = match wire {
            WireType::Varint => {
                decode_varint(&mut buf).ok()?;
                0
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let payload = buf.get(..len)?;
                f(tag, payload);
                len
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        };
        buf = buf.get(skip..)?;
    }
    Some(())
}

/// The one message of a unary request body.
fn unframe(mut body: Bytes) -> Result<Bytes, tonic::Status> {
    if body.len() < PREFIX {
        return Err(tonic::Status::internal(
            "request body is not one gRPC message",
        ));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 {
        return Err(tonic::Status::unimplemented(
            "compressed request messages are not supported",
        ));
    }
    if len != body.len() {
        return Err(tonic::Status::internal(format!(
            "request body holds {} bytes after the gRPC prefix, which announces {len}",
            body.len()
        )));
    }
    Ok(body)
}

/// An OK call's response: headers, one framed message, `grpc-status: 0`.
fn answer_response(answer: &RateLimitResponse) -> Response<CallBody> {
    let len = answer.encoded_len();
    let mut buf = BytesMut::with_capacity(PREFIX + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    // Cannot fail: the buffer has room for exactly the encoded length.
    let _ = answer.encode(&mut buf);
    let mut resp = Response::new(CallBody::Unary {
        message: Some(buf.freeze()),
        done: false,
    });
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    resp
}

/// When a tonic-served call's caller gives up (its `grpc-timeout`), if it said.
pub fn deadline_of(metadata: &tonic::metadata::MetadataMap) -> Option<tokio::time::Instant> {
    grpc_timeout(metadata.as_ref()).map(|t| tokio::time::Instant::now() + t)
}

/// The caller's deadline (`grpc-timeout`: up to 8 digits and a unit); an invalid value is
/// ignored, as tonic ignores it.
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A response body: our unary answer, or whatever tonic's router answered.
pub enum CallBody {
    /// One message, then the `grpc-status: 0` trailer.
    Unary {
        message: Option<Bytes>,
        done: bool,
    },
    Other(tonic::body::Body),
}

impl Default for CallBody {
    /// A body with nothing in it (a trailers-only error response).
    fn default() -> Self {
        CallBody::Unary {
            message: None,
            done: true,
        }
    }
}

impl Body for CallBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        match self.get_mut() {
            CallBody::Unary { message, done } => {
                if let Some(m) = message.take() {
                    return Poll::Ready(Some(Ok(Frame::data(m))));
                }
                if *done {
                    return Poll::Ready(None);
                }
                *done = true;
                let mut trailers = HeaderMap::with_capacity(1);
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            CallBody::Other(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            CallBody::Unary { message, done } => message.is_none() && *done,
            CallBody::Other(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            CallBody::Unary { message, .. } => {
                SizeHint::with_exact(message.as_ref().map_or(0, |m| m.len() as u64))
            }
            CallBody::Other(body) => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::common::rate_limit_descriptor::Entry;
    use crate::pb::common::RateLimitDescriptor;

    fn request(descriptors: usize, entries: usize) -> Vec<u8> {
        let entry = Entry {
            key: "k".into(),
            value: "v".into(),
        };
        RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![
                RateLimitDescriptor {
                    entries: vec![entry; entries],
                    ..Default::default()
                };
                descriptors
            ],
            hits_addend: 3,
        }
        .encode_to_vec()
    }

    #[test]
    fn descriptors_and_entries_are_counted_before_decoding() {
        let b = Bounds::default();
        let check = |message: &[u8]| check_counts(message, &b).map_err(|e| e.to_string());
        assert_eq!(check(&request(64, 16)), Ok(()));
        assert_eq!(
            check(&request(65, 1)),
            Err("request has 65 descriptors; the maximum is 64".into())
        );
        assert_eq!(
            check(&request(3, 17)),
            Err("descriptor 0 has 17 entries; the maximum is 16".into())
        );
        // 4 MiB of empty descriptors (each `12 02 0a 00`: one empty entry).
        let hostile = [0x12u8, 0x02, 0x0a, 0x00].repeat(1 << 20);
        assert_eq!(
            check(&hostile),
            Err("request has 1048576 descriptors; the maximum is 64".into())
        );
        // Broken encodings are the decoder's to refuse.
        assert_eq!(check(&[0xff; 16]), Ok(()));
        assert_eq!(check(&[0x12, 0x7f, 0x0a]), Ok(()));
    }

    fn headers(timeout: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("grpc-timeout", HeaderValue::from_str(timeout).unwrap());
        h
    }

    #[test]
    fn grpc_timeouts_parse_as_the_spec_writes_them() {
        assert_eq!(
            grpc_timeout(&headers("20m")),
            Some(Duration::from_millis(20))
        );
        assert_eq!(
            grpc_timeout(&headers("1H")),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            grpc_timeout(&headers("99999999n")),
            Some(Duration::from_nanos(99_999_999))
        );
        assert_eq!(grpc_timeout(&headers("5S")), Some(Duration::from_secs(5)));
        for bad in ["", "m", "20", "20x", "123456789m", "-1m", "1.5S"] {
            assert_eq!(grpc_timeout(&headers(bad)), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }

    #[test]
    fn a_body_is_one_uncompressed_message_of_its_announced_length() {
        let framed = |flag: u8, len: u32, payload: &[u8]| {
            let mut b = BytesMut::new();
            b.put_u8(flag);
            b.put_u32(len);
            b.put_slice(payload);
            b.freeze()
        };
        assert_eq!(
            unframe(framed(0, 3, b"abc")).unwrap(),
            Bytes::from_static(b"abc")
        );
        assert_eq!(unframe(framed(0, 0, b"")).unwrap(), Bytes::new());
        let code = |b| unframe(b).unwrap_err().code();
        assert_eq!(code(framed(1, 3, b"abc")), tonic::Code::Unimplemented);
        assert_eq!(code(framed(0, 4, b"abc")), tonic::Code::Internal);
        assert_eq!(code(framed(0, 2, b"abc")), tonic::Code::Internal);
        assert_eq!(code(Bytes::from_static(b"\0\0\0")), tonic::Code::Internal);
    }
}
