//! The HTTP admin server (envoyproxy/ratelimit's port 8080 duties): health probes, the
//! `/json` decision endpoint and `/rlconfig`; the operator's `/counters`, `/top` and status
//! page (behind the token once one is set), and, on the write listener only,
//! `POST /counters/reset`. This file is the router and the small handlers; what they share
//! is [`state`], the token check one middleware layer ([`token`]).

pub mod budgets;
pub mod counters;
pub mod html;
pub mod json;
pub mod state;
pub mod status_page;
pub mod token;
pub mod top_page;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::admin::counters::{CounterError, Selector};
use crate::admin::json::{parse_request, render_response};
use crate::admin::state::{AdminState, Readiness};
use crate::pb::rls::rate_limit_response::Code;
use crate::service::error::CallError;
use crate::store::Store;

/// Every admin route's path (`--metrics-path` must be another).
pub const ROUTES: [&str; 8] = [
    "/",
    "/healthcheck",
    "/readyz",
    "/healthz",
    "/rlconfig",
    "/json",
    "/counters",
    "/top",
];

/// The largest request body an admin endpoint reads (`POST /json`, a reset's form); a larger
/// one is answered 413 Payload Too Large without being read whole.
pub const MAX_BODY: usize = 1 << 20;

/// The admin routes; `POST /json` (it charges real counters with caller-chosen hits) only
/// with `json`.
pub fn router<S: Store>(state: Arc<AdminState<S>>, json: bool, ui: bool) -> Router {
    // What reveals tenants and usage: behind the token, once one is set.
    let reads = Router::new()
        .route("/counters", get(counters_endpoint::<S>))
        .route("/top", get(crate::admin::top_page::endpoint::<S>))
        .route("/budgets", get(crate::admin::budgets::endpoint::<S>));
    let reads = if ui {
        reads.route("/", get(status_page::<S>))
    } else {
        reads
    };
    let reads = reads.route_layer(middleware::from_fn_with_state(
        state.token.clone(),
        token::guard_reads,
    ));
    let router = Router::new()
        .route("/healthcheck", get(healthcheck::<S>))
        .route("/readyz", get(readyz::<S>))
        .route("/healthz", get(|| async { "OK" }))
        .route("/rlconfig", get(rlconfig::<S>))
        .route("/metrics", get(metrics::<S>))
        .merge(reads);
    let router = match state.metrics_path.as_str() {
        "/metrics" | "" => router,
        path => router.route(path, get(metrics::<S>)),
    };
    let router = if json {
        router.route("/json", post(json_endpoint::<S>))
    } else {
        router.route("/json", post(json_disabled))
    };
    router
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::map_response(guarded_headers))
        .with_state(state)
}

/// What every admin response carries for a browser: no content sniffing, never framed by
/// another page (the status page's forms cannot be clickjacked), no referrer sent on.
async fn guarded_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("frame-ancestors 'none'"),
    );
    h.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("no-referrer"),
    );
    resp
}

/// The write listener's routes (`--admin-write-addr`): `POST /counters/reset`, token required.
/// Serve it with connect info (the peer address is logged with every reset).
pub fn write_router<S: Store>(state: Arc<AdminState<S>>) -> Router {
    Router::new()
        .route("/counters/reset", post(reset_endpoint::<S>))
        .route_layer(middleware::from_fn_with_state(
            state.token.clone(),
            token::guard_writes,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::map_response(guarded_headers))
        .with_state(state)
}

fn counter_error(e: CounterError) -> Response {
    let status = match &e {
        CounterError::BadQuery(_) | CounterError::BadDescriptor(_) => StatusCode::BAD_REQUEST,
        CounterError::NotFound(_) => StatusCode::NOT_FOUND,
        CounterError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, format!("{e}\n")).into_response()
}

fn json(value: serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn descriptor_json(sel: &Selector) -> serde_json::Value {
    sel.entries
        .iter()
        .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
        .collect()
}

/// The status page; `?domain=…&key=…&value=…` fills its counter lookup.
async fn status_page<S: Store>(
    State(st): State<Arc<AdminState<S>>>,
    RawQuery(query): RawQuery,
) -> Response {
    let input = crate::admin::status_page::PageInput {
        lookup: query.as_deref().filter(|q| q.contains("domain=")),
    };
    let page = crate::admin::status_page::render(&st, input).await;
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        page,
    )
        .into_response()
}

/// `GET /counters?domain=D&descriptor=k=v,…`: every limit the descriptor reaches, as it
/// stands; never writes.
async fn counters_endpoint<S: Store>(
    State(st): State<Arc<AdminState<S>>>,
    RawQuery(query): RawQuery,
) -> Response {
    let sel = match counters::parse_query(query.as_deref().unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return counter_error(e),
    };
    let config = st.config.load_full();
    let store = st.limiter.store();
    match counters::inspect(&config, &**store, st.limiter.bounds(), &sel).await {
        Ok(views) => json(serde_json::json!({
            "domain": sel.domain,
            "descriptor": descriptor_json(&sel),
            "store": store.name(),
            "counters": views,
        })),
        Err(e) => counter_error(e),
    }
}

/// `POST /counters/reset?domain=D&descriptor=…[&limit=NAME]` (or the same as a form body).
async fn reset_endpoint<S: Store>(
    State(st): State<Arc<AdminState<S>>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let query = match query.filter(|q| !q.is_empty()) {
        Some(q) => q,
        None => String::from_utf8_lossy(&body).into_owned(),
    };
    let sel = match counters::parse_query(query.trim()) {
        Ok(s) => s,
        Err(e) => return counter_error(e),
    };
    let config = st.config.load_full();
    let store = st.limiter.store();
    match counters::reset(&config, &**store, st.limiter.bounds(), &sel).await {
        Ok(views) => {
            let metrics = st.limiter.metrics();
            metrics.counter_resets.inc_by(views.len() as u64);
            let descriptor = sel.printable_descriptor();
            for v in &views {
                tracing::warn!(
                    %peer,
                    domain = %crate::base::log_throttle::printable(&sel.domain),
                    descriptor = %descriptor,
                    limit = %crate::base::log_throttle::printable(&v.name),
                    key = %crate::base::log_throttle::printable(&v.key),
                    used_before = v.used_before,
                    "counter reset by an operator"
                );
            }
            json(serde_json::json!({
                "domain": sel.domain,
                "descriptor": descriptor_json(&sel),
                "reset": views,
            }))
        }
        Err(e) => {
            tracing::warn!(%peer, error = %e, "counter reset failed");
            counter_error(e)
        }
    }
}

async fn json_disabled() -> Response {
    (
        StatusCode::NOT_FOUND,
        "POST /json is off; start tollgate with --admin-json (TOLLGATE_ADMIN_JSON=true) to \
         enable it\n",
    )
        .into_response()
}

/// envoyproxy/ratelimit's health check: `200 OK` when serving, an empty 500 otherwise.
async fn healthcheck<S: Store>(State(st): State<Arc<AdminState<S>>>) -> Response {
    if st.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

/// Readiness with its reason: `NOT READY: redis 127.0.0.1:6390: connection refused`; a ready
/// store with a risk adds a `warning:` line.
async fn readyz<S: Store>(State(st): State<Arc<AdminState<S>>>) -> Response {
    match st.readiness() {
        Readiness::Ready { warning: Some(w) } => {
            (StatusCode::OK, format!("OK\nwarning: {w}\n")).into_response()
        }
        Readiness::Ready { warning: None } => (StatusCode::OK, "OK\n").into_response(),
        Readiness::NotReady(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("NOT READY: {reason}\n"),
        )
            .into_response(),
    }
}

async fn metrics<S: Store>(State(st): State<Arc<AdminState<S>>>) -> Response {
    let (content_type, body) = st.limiter.metrics().exposition();
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The compiled limits, as envoyproxy/ratelimit's lines (tools parse them), or with
/// `?view=human` each in its own terms (`config::explain`); headers say which reload attempt
/// this is and, when the last attempt was rejected, why (the limits shown are then the ones
/// still running).
async fn rlconfig<S: Store>(
    State(st): State<Arc<AdminState<S>>>,
    RawQuery(query): RawQuery,
) -> Response {
    let human = match query.as_deref().unwrap_or("") {
        "" | "view=envoy" => false,
        "view=human" => true,
        other => {
            let msg = format!(
                "unknown query '{other}': /rlconfig takes view=envoy (the default) or view=human\n"
            );
            return (StatusCode::BAD_REQUEST, msg).into_response();
        }
    };
    let status = &st.reload_status;
    let mut headers = vec![(
        "x-tollgate-config-generation",
        status.generation().to_string(),
    )];
    if let Some((server, xds)) = &st.xds {
        headers.push(("x-tollgate-config-source", format!("xds {server}")));
        let version = xds.version().unwrap_or_else(|| "none yet".into());
        headers.push(("x-tollgate-config-version", version));
    }
    if let Some(error) = status.last_error() {
        // Header values must be visible ASCII; the error text goes in as such.
        let clean: String = error
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        headers.push(("x-tollgate-config-error", clean));
    }
    let config = st.config.load();
    let body = if human {
        config.explain()
    } else {
        config.describe()
    };
    let mut resp = body.into_response();
    for (name, value) in headers {
        if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
            resp.headers_mut().insert(name, v);
        }
    }
    resp
}

/// Proto3 JSON decision: 200 OK, 429 over limit, 400 bad input, 503 store unavailable.
async fn json_endpoint<S: Store>(State(st): State<Arc<AdminState<S>>>, body: Bytes) -> Response {
    let req = match parse_request(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match st.limiter.should_rate_limit(&req).await {
        Ok(resp) => {
            let status = if resp.overall_code == Code::OverLimit as i32 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                render_response(&resp).to_string(),
            )
                .into_response()
        }
        Err(e) => {
            let status = match e {
                CallError::Invalid(_) => StatusCode::BAD_REQUEST,
                CallError::Unavailable(_) | CallError::Overloaded(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                CallError::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            };
            (status, e.to_string()).into_response()
        }
    }
}
