//! Who is being limited, shown: `GET /top?domain=D[&n=N]` (JSON only, what `tollgate top`
//! asks each instance for) and the status page's section (the top descriptors and a chart of
//! OVER_LIMIT per minute).

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::admin::html::esc;
use crate::admin::state::AdminState;
use crate::config::Config;
use crate::store::Store;
use crate::telemetry::top::{Heavy, TopReport, K};

/// Descriptors shown unless `n` says otherwise.
pub const DEFAULT_N: usize = 20;

/// This instance's name in `/top` answers: its host name.
fn instance() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "tollgate".into())
}

/// `GET /top?domain=D[&n=N]`.
pub async fn endpoint<S: Store>(
    State(st): State<std::sync::Arc<AdminState<S>>>,
    RawQuery(query): RawQuery,
) -> Response {
    let (mut domain, mut n) = (None, DEFAULT_N);
    for (k, v) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match &*k {
            "domain" => domain = Some(v.into_owned()),
            "n" => match v.parse::<usize>() {
                Ok(x) if (1..=K).contains(&x) => n = x,
                _ => {
                    return (StatusCode::BAD_REQUEST, format!("n must be 1 to {K}\n"))
                        .into_response()
                }
            },
            _ => {}
        }
    }
    let Some(domain) = domain.filter(|d| !d.is_empty()) else {
        return (
            StatusCode::BAD_REQUEST,
            "a domain is required: /top?domain=D\n",
        )
            .into_response();
    };
    if !st.config.load().domains.contains_key(&domain) {
        return (
            StatusCode::NOT_FOUND,
            format!(
                "domain '{}' is not configured\n",
                crate::base::log_throttle::printable(&domain)
            ),
        )
            .into_response();
    }
    let report = st
        .limiter
        .top()
        .report(&domain, n)
        .unwrap_or_else(|| TopReport {
            minute: Vec::new(),
            hour: Vec::new(),
            total_minute: 0,
            total_hour: 0,
            per_minute: vec![0; 60],
        });
    let body = serde_json::json!({
        "domain": domain,
        "instance": instance(),
        "k": K,
        "minute": report.minute,
        "hour": report.hour,
        "total_minute": report.total_minute,
        "total_hour": report.total_hour,
        "per_minute": report.per_minute,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The status page's section: per domain with OVER_LIMIT answers, the top descriptors of the
/// last minute and hour, and a bar chart of the last 60 minutes.
pub fn section<S: Store>(st: &AdminState<S>, config: &Config, page: &mut String) {
    page.push_str("<section id=\"top\"><h2>Limited right now</h2>");
    let mut names: Vec<&String> = config.domains.keys().collect();
    names.sort();
    let mut any = false;
    for d in names {
        let Some(r) = st.limiter.top().report(d, DEFAULT_N) else {
            continue;
        };
        if r.total_hour == 0 {
            continue;
        }
        any = true;
        let _ = write!(
            page,
            "<h3>{}</h3><p class=\"muted\">{} OVER_LIMIT answers in the last minute, {} in the \
             last hour (this instance; counts may overstate by the ± shown).</p>",
            esc(d),
            r.total_minute,
            r.total_hour
        );
        chart(&r.per_minute, page);
        page.push_str("<table><tr><th>descriptor</th><th>last minute</th><th>last hour</th></tr>");
        let minute: HashMap<&str, &Heavy> = r
            .minute
            .iter()
            .map(|h| (h.descriptor.as_str(), h))
            .collect();
        for h in &r.hour {
            let m = minute
                .get(h.descriptor.as_str())
                .map_or("0".to_string(), |m| count(m));
            let _ = write!(
                page,
                "<tr><td><code>{}</code></td><td>{m}</td><td>{}</td></tr>",
                esc(&h.descriptor),
                count(h)
            );
        }
        page.push_str("</table>");
    }
    if !any {
        page.push_str("<p class=\"muted\">No OVER_LIMIT answer in the last hour.</p>");
    }
    page.push_str("</section>");
}

fn count(h: &Heavy) -> String {
    if h.error > 0 {
        format!("{} ±{}", h.over_limit, h.error)
    } else {
        h.over_limit.to_string()
    }
}

/// OVER_LIMIT per minute as inline SVG bars, oldest left.
fn chart(per_minute: &[u64], page: &mut String) {
    let (w, h, bar) = (600u64, 80u64, 10u64);
    let max = per_minute.iter().copied().max().unwrap_or(0).max(1);
    let _ = write!(
        page,
        "<svg width=\"{w}\" height=\"{}\" role=\"img\" aria-label=\"OVER_LIMIT answers per \
         minute, last 60 minutes\"><line class=\"axis\" x1=\"0\" y1=\"{h}\" x2=\"{w}\" y2=\"{h}\"/>",
        h + 14
    );
    for (i, &c) in per_minute.iter().enumerate() {
        let bh = c * h / max;
        if bh > 0 {
            let _ = write!(
                page,
                "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{bh}\"><title>{c}</title></rect>",
                i as u64 * bar,
                h - bh,
                bar - 2
            );
        }
    }
    let _ = write!(
        page,
        "<text x=\"0\" y=\"{}\">60 min ago</text><text x=\"{}\" y=\"{}\">now (max {max}/min)</text></svg>",
        h + 12,
        w - 110,
        h + 12
    );
}
