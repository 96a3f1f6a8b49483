//! The admin bearer token (`--admin-token-file`): required on the write listener
//! (`--admin-write-addr`, which resets counters) and, once set, for the admin endpoints that
//! reveal tenants and usage (`/counters`, `/top`, the status page).
//!
//! A caller sends `Authorization: Bearer <token>`; for the reads, a browser may send it as the
//! password of HTTP Basic authentication (any user name), which it asks for after a `401` with
//! `WWW-Authenticate: Basic`. The write listener takes a bearer token only and refuses any
//! request a browser sent ([`guard_writes`]). The comparison takes the same time wherever the first wrong byte
//! is (only the length can be learned from timing).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The token, as read from its file (surrounding whitespace trimmed).
pub struct AdminToken {
    token: Vec<u8>,
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// Reads the token from `path`; an empty file is an error (it would let anyone in).
    pub fn from_file(path: &Path) -> anyhow::Result<AdminToken> {
        let raw = std::fs::read(path).map_err(|e| {
            anyhow::anyhow!("cannot read --admin-token-file {}: {e}", path.display())
        })?;
        AdminToken::new(&raw)
            .ok_or_else(|| anyhow::anyhow!("--admin-token-file {} is empty", path.display()))
    }

    /// The token `raw` holds, surrounding whitespace trimmed; `None` when nothing is left.
    pub fn new(raw: &[u8]) -> Option<AdminToken> {
        let token = raw.trim_ascii().to_vec();
        (!token.is_empty()).then_some(AdminToken { token })
    }

    /// Whether `headers` carry the token as a bearer token (the write listener's only form: a
    /// browser never adds one by itself).
    pub fn allows_bearer(&self, headers: &HeaderMap) -> bool {
        match authorization(headers) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"bearer") => {
                same(rest, &self.token)
            }
            _ => false,
        }
    }

    /// Whether `headers` carry the token (bearer, or as a Basic password).
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        let Some((scheme, rest)) = authorization(headers) else {
            return false;
        };
        if scheme.eq_ignore_ascii_case(b"bearer") {
            return same(rest, &self.token);
        }
        if scheme.eq_ignore_ascii_case(b"basic") {
            let Some(decoded) = base64_decode(rest) else {
                return false;
            };
            let password = match decoded.iter().position(|&b| b == b':') {
                Some(i) => &decoded[i + 1..],
                None => &decoded[..],
            };
            return same(password, &self.token);
        }
        false
    }
}

/// The layer in front of what reveals tenants and usage: with a token set, a request without
/// it gets a `401` with a Basic challenge (a browser then asks for the token as a password).
pub async fn guard_reads(
    State(token): State<Option<Arc<AdminToken>>>,
    req: Request,
    next: Next,
) -> Response {
    match &token {
        Some(t) if !t.allows(req.headers()) => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"tollgate\", charset=\"UTF-8\"",
            )],
            "this endpoint needs the admin token: Authorization: Bearer <token>\n",
        )
            .into_response(),
        _ => next.run(req).await,
    }
}

/// The layer in front of the write listener: the token is always required (the listener does
/// not start without one), as a bearer token only, and a request a browser sent is refused
/// whatever it carries (cross-site request forgery: a page elsewhere posting a form here).
/// A refusal is logged with the peer's address.
///
/// A browser marks every request it sends for a page (`Origin` on a `POST`, `Sec-Fetch-Site` on
/// every request of a current browser), and replays HTTP Basic credentials it once used for an
/// origin on its own; a page cannot add an `Authorization: Bearer` header to a form post, and
/// a script on another origin cannot send one without a CORS preflight that this listener
/// never grants. The write listener serves no page, so no browser request belongs here.
pub async fn guard_writes(
    State(token): State<Option<Arc<AdminToken>>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    if let Some(mark) = ["origin", "sec-fetch-site"]
        .into_iter()
        .find(|h| headers.contains_key(*h))
    {
        tracing::warn!(%peer, header = mark, "counter reset refused: sent by a browser");
        return (
            StatusCode::FORBIDDEN,
            format!(
                "resets are refused from a browser (this request carries {mark}): the write listener takes requests from tools (curl, tollgate reset) with Authorization: Bearer <token>\n"
            ),
        )
            .into_response();
    }
    if token.as_ref().is_some_and(|t| t.allows_bearer(headers)) {
        return next.run(req).await;
    }
    let basic = authorization(headers).is_some_and(|(s, _)| s.eq_ignore_ascii_case(b"basic"));
    tracing::warn!(%peer, basic, "counter reset refused: no valid admin bearer token");
    let why = if basic {
        "resets take the admin token as a bearer token only, not HTTP Basic credentials (a browser replays those on its own): Authorization: Bearer <token>\n"
    } else {
        "resets need the admin token: Authorization: Bearer <token>\n"
    };
    (StatusCode::UNAUTHORIZED, why).into_response()
}

/// `Authorization`'s scheme and credentials.
fn authorization(headers: &HeaderMap) -> Option<(&[u8], &[u8])> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let i = value.iter().position(|&b| b == b' ')?;
    Some((&value[..i], value[i + 1..].trim_ascii()))
}

/// Equal, in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, &x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(!x);
    }
    std::hint::black_box(diff) == 0
}

/// Standard base64 (with or without padding); `None` when it is not.
fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s.iter().take_while(|&&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> AdminToken {
        AdminToken {
            token: b"s3cret".to_vec(),
        }
    }

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", value.parse().unwrap());
        h
    }

    #[test]
    fn the_token_is_taken_as_bearer_or_as_a_basic_password_only() {
        let t = token();
        assert!(t.allows(&with("Bearer s3cret")));
        assert!(t.allows(&with("bearer  s3cret")));
        // "admin:s3cret" and ":s3cret".
        assert!(t.allows(&with("Basic YWRtaW46czNjcmV0")));
        assert!(t.allows(&with("Basic OnMzY3JldA==")));
        for wrong in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "Bearer S3cret",
            "Bearer",
            "s3cret",
            "Basic YWRtaW46czNjcmVU",
            "Basic !!!",
            "Token s3cret",
        ] {
            assert!(!t.allows(&with(wrong)), "{wrong}");
        }
        assert!(!t.allows(&HeaderMap::new()));
    }

    #[test]
    fn writes_take_the_token_as_bearer_only() {
        let t = token();
        assert!(t.allows_bearer(&with("Bearer s3cret")));
        assert!(!t.allows_bearer(&with("Basic YWRtaW46czNjcmV0")));
        assert!(!t.allows_bearer(&with("Bearer s3cre")));
        assert!(!t.allows_bearer(&HeaderMap::new()));
    }
}
