//! Budgets: for each `spend:` limit and calendar window charged in its current period, the
//! biggest spenders with what they used (the store's counters, read back exactly), what is
//! left, their burn rate over the last hour and when they run out at that rate. `GET /budgets`
//! serves it as JSON (Grafana's JSON and Infinity data sources), the status page as a panel
//! with a chart per budget. Whom to show comes from `service::budgets` (a sketch of this
//! instance's charges: its error bound is there).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::admin::html::esc;
use crate::admin::state::AdminState;
use crate::algorithm::inspect;
use crate::algorithm::rule::Role;
use crate::base::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::limit::money::format_micros;
use crate::plan::{Plan, PlannedCharge};
use crate::service::budgets::{who, K};
use crate::store::Store;

/// Spenders shown per budget unless `?n=` says otherwise (at most [`K`]).
pub const DEFAULT_N: usize = 10;

/// One budget as `/budgets` and the status page show it.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetView {
    pub domain: String,
    /// The limit's name, else its rule's path (its metrics' `limit` label).
    pub limit: String,
    /// The limit in its own terms (`50 USD per calendar month (UTC) per team`).
    pub terms: String,
    /// The money's currency for a `spend:` limit (amounts are micro-units of it); none: units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// The limit per counter.
    pub limit_amount: u64,
    pub period_start_unix_ms: u64,
    pub period_end_unix_ms: u64,
    /// What was charged through this instance in the period, over every counter.
    pub charged_here: u64,
    /// A counter charged more than this through this instance in the period is listed.
    pub error_bound: u64,
    pub spenders: Vec<SpenderView>,
}

/// One counter of a budget.
#[derive(Debug, Clone, Serialize)]
pub struct SpenderView {
    /// Its descriptor entries (`team_spend=acme`).
    pub who: String,
    /// Its counter key, with the store's prefix.
    pub key: String,
    /// The store's count, exact.
    pub used: u64,
    pub remaining: u64,
    pub overdraft_debt: u64,
    /// Used per hour over the last hour's readings (`None` until they span five minutes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burn_per_hour: Option<u64>,
    /// Over how long the burn rate was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burn_over_s: Option<u64>,
    /// When it runs out at that rate, before its period ends; `None`: not in this period at
    /// that rate, or no rate yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_out_unix_ms: Option<u64>,
    /// `spent`, `at <time>`, `not this period` or `no rate yet`.
    pub runs_out: String,
}

impl BudgetView {
    /// `n` as people read this budget's amounts: money with its currency, else a count.
    pub fn amount(&self, n: u64) -> String {
        match &self.currency {
            Some(c) => format!("{} {c}", format_micros(n)),
            None => n.to_string(),
        }
    }
}

/// Every budget charged in its current period, each with its `n` biggest spenders read back
/// from the store in one read. Each reading is kept for the burn rate.
pub async fn report<S: Store>(
    st: &AdminState<S>,
    config: &Config,
    n: usize,
) -> Result<Vec<BudgetView>, crate::store::error::StoreError> {
    let budgets = st.limiter.budgets();
    let now_us = SystemClock.now_us();
    let tracked = budgets.tracked(n.min(K), now_us);
    if tracked.is_empty() {
        return Ok(Vec::new());
    }
    let mut plan = Plan::no_limits(0);
    for t in &tracked {
        for s in &t.top {
            plan.charges.push(PlannedCharge {
                descriptor: 0,
                limit: Cow::Owned(t.limit.clone()),
                stats: None,
                key: s.key.clone(),
                cost: 0,
                role: Role::Enforced,
            });
        }
    }
    let mut readings = st.limiter.store().read(&plan).await?.into_iter();
    let terms = terms_by_label(config);
    let mut out = Vec::with_capacity(tracked.len());
    for t in tracked {
        let currency = config
            .domains
            .get(&t.domain)
            .and_then(|d| d.prices.as_ref())
            .map(|p| p.currency.clone())
            .filter(|_| t.limit.spend);
        let mut spenders = Vec::with_capacity(t.top.len());
        for s in &t.top {
            let Some(r) = readings.next() else { break };
            let u = inspect::usage(&r.state, &t.limit.params, r.now_us);
            let burn = budgets.sample(&t.domain, &t.limit, &s.key, now_us, u.used);
            let (runs_out_unix_ms, runs_out) = runs_out(u.remaining, burn, now_us, t.period.1);
            spenders.push(SpenderView {
                who: who(&s.key),
                key: r.key,
                used: u.used,
                remaining: u.remaining,
                overdraft_debt: u.debt,
                burn_per_hour: burn.map(|(rate, _)| rate.round() as u64),
                burn_over_s: burn.map(|(_, span)| span / 1_000_000),
                runs_out_unix_ms,
                runs_out,
            });
        }
        spenders.sort_by(|a, b| b.used.cmp(&a.used).then_with(|| a.who.cmp(&b.who)));
        out.push(BudgetView {
            terms: terms
                .iter()
                .find(|(d, l, _)| *d == t.domain && *l == t.limit.metric_label)
                .map_or_else(String::new, |(_, _, x)| x.clone()),
            domain: t.domain,
            limit: t.limit.metric_label.clone(),
            currency,
            limit_amount: t.limit.params.limit,
            period_start_unix_ms: t.period.0 / 1000,
            period_end_unix_ms: t.period.1 / 1000,
            charged_here: t.total,
            error_bound: t.total / K as u64,
            spenders,
        });
    }
    Ok(out)
}

/// When `remaining` runs out at `burn` (per hour), before `period_end_us`.
fn runs_out(
    remaining: u64,
    burn: Option<(f64, u64)>,
    now_us: u64,
    period_end_us: u64,
) -> (Option<u64>, String) {
    if remaining == 0 {
        return (Some(now_us / 1000), "spent".into());
    }
    let Some((per_hour, _)) = burn else {
        return (None, "no rate yet".into());
    };
    if per_hour <= 0.0 {
        return (None, "not this period".into());
    }
    let at_us = now_us as f64 + remaining as f64 / per_hour * 3_600_000_000.0;
    if at_us >= period_end_us as f64 {
        return (None, "not this period".into());
    }
    let at_ms = (at_us / 1000.0) as u64;
    (
        Some(at_ms),
        format!("in {}", human_span((at_ms - now_us / 1000) / 1000)),
    )
}

fn human_span(s: u64) -> String {
    match s {
        0..=119 => format!("{s} s"),
        120..=7_199 => format!("{} min", s / 60),
        7_200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

/// Each limit's terms by (domain, label), from `Config::explain`'s lines.
fn terms_by_label(config: &Config) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (name, d) in &config.domains {
        let currency = d.prices.as_ref().map(|p| p.currency.as_str());
        let mut rules = Vec::new();
        collect(&d.root, &mut rules);
        for rule in rules {
            for l in &rule.limits {
                out.push((
                    name.clone(),
                    l.metric_label.clone(),
                    crate::config::explain::terms(rule, l, currency),
                ));
            }
        }
    }
    out
}

fn collect<'a>(level: &'a crate::config::Level, out: &mut Vec<&'a crate::config::Rule>) {
    for r in level.rules() {
        out.push(r);
        collect(&r.children, out);
    }
}

/// `GET /budgets[?n=N]`: every budget, as JSON.
pub async fn endpoint<S: Store>(
    State(st): State<Arc<AdminState<S>>>,
    RawQuery(query): RawQuery,
) -> Response {
    let n = match query.as_deref().unwrap_or("") {
        "" => DEFAULT_N,
        q => match q.strip_prefix("n=").and_then(|v| v.parse::<usize>().ok()) {
            Some(n) if (1..=K).contains(&n) => n,
            _ => {
                let msg = format!("bad query '{q}': /budgets takes n=1..{K}\n");
                return (StatusCode::BAD_REQUEST, msg).into_response();
            }
        },
    };
    let config = st.config.load_full();
    match report(&st, &config, n).await {
        Ok(views) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::json!({ "k": K, "budgets": views }).to_string(),
        )
            .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// Reads the budgets once a minute, so their burn rates have readings without a page load.
pub async fn sample_every_minute<S: Store>(st: Arc<AdminState<S>>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let config = st.config.load_full();
        if let Err(e) = report(&st, &config, DEFAULT_N).await {
            tracing::debug!(error = %e, "budgets: reading the biggest spenders failed");
        }
    }
}

/// The status page's panel: per budget, its spenders with a bar each (use against the limit,
/// a mark where an even pace through the period would be), and the figures.
pub async fn section<S: Store>(st: &AdminState<S>, config: &Config, page: &mut String) {
    page.push_str("<section id=\"budgets\"><h2>Budgets</h2>");
    let views = match report(st, config, DEFAULT_N).await {
        Ok(v) => v,
        Err(e) => {
            let _ = write!(
                page,
                "<p class=\"warn\">{}</p></section>",
                esc(&e.to_string())
            );
            return;
        }
    };
    if views.is_empty() {
        page.push_str(
            "<p class=\"muted\">No budget (a <code>spend:</code> limit or a calendar window) \
             charged in its current period on this instance.</p></section>",
        );
        return;
    }
    let now_ms = SystemClock.now_us() / 1000;
    for v in &views {
        let _ = write!(
            page,
            "<h3 class=\"budget\" data-domain=\"{}\" data-limit=\"{}\">{}.{}</h3>\
             <p class=\"muted\">{} · biggest spenders through this instance (each charged \
             more than {} here is listed) · JSON at <a href=\"budgets\">/budgets</a></p>",
            esc(&v.domain),
            esc(&v.limit),
            esc(&v.domain),
            esc(&v.limit),
            esc(&v.terms),
            esc(&v.amount(v.error_bound)),
        );
        chart(v, now_ms, page);
        page.push_str(
            "<table class=\"spenders\"><tr><th>who</th><th>used</th><th>left</th>\
             <th>burn per hour</th><th>runs out</th></tr>",
        );
        for s in &v.spenders {
            let burn = s.burn_per_hour.map_or_else(
                || "—".to_string(),
                |b| {
                    format!(
                        "{} (over {} min)",
                        v.amount(b),
                        s.burn_over_s.unwrap_or(0) / 60
                    )
                },
            );
            let _ = write!(
                page,
                "<tr data-key=\"{}\"><td><code>{}</code></td><td class=\"used\" data-used=\"{}\">{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&s.key),
                esc(&s.who),
                s.used,
                esc(&v.amount(s.used)),
                esc(&v.amount(s.remaining)),
                esc(&burn),
                esc(&s.runs_out)
            );
        }
        page.push_str("</table>");
    }
    page.push_str("</section>");
}

/// One bar per spender: its use against the limit (past it, the debt in red), and a line where
/// an even pace through the period would be now.
fn chart(v: &BudgetView, now_ms: u64, page: &mut String) {
    let (label_w, bar_w, row) = (170u64, 420u64, 18u64);
    let h = row * v.spenders.len() as u64 + 16;
    let w = label_w + bar_w + 10;
    let limit = v.limit_amount.max(1);
    let span = v
        .period_end_unix_ms
        .saturating_sub(v.period_start_unix_ms)
        .max(1);
    let pace = now_ms.saturating_sub(v.period_start_unix_ms).min(span) * bar_w / span;
    let _ = write!(
        page,
        "<svg width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"use of {} against its \
         limit, per spender\">",
        esc(&v.limit)
    );
    for (i, s) in v.spenders.iter().enumerate() {
        let y = i as u64 * row;
        let used = s.used.min(limit) * bar_w / limit;
        let over = s.used.saturating_sub(limit).min(limit) * bar_w / limit;
        let mut name = s.who.clone();
        if name.chars().count() > 26 {
            name = name.chars().take(25).collect::<String>() + "…";
        }
        let _ = write!(
            page,
            "<text x=\"0\" y=\"{}\">{}</text><rect x=\"{label_w}\" y=\"{}\" width=\"{bar_w}\" \
             height=\"{}\" fill=\"#eef0f3\"/><rect x=\"{label_w}\" y=\"{}\" width=\"{used}\" \
             height=\"{}\" fill=\"#2e6fbd\"><title>{} of {}</title></rect>",
            y + 12,
            esc(&name),
            y + 2,
            row - 4,
            y + 2,
            row - 4,
            esc(&v.amount(s.used)),
            esc(&v.amount(v.limit_amount))
        );
        if over > 0 {
            let _ = write!(
                page,
                "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{over}\" height=\"{}\"/>",
                label_w + bar_w - over,
                y + 2,
                row - 4
            );
        }
    }
    let x = label_w + pace;
    let _ = write!(
        page,
        "<line class=\"axis\" stroke-dasharray=\"3,2\" x1=\"{x}\" y1=\"0\" x2=\"{x}\" y2=\"{}\"/>\
         <text x=\"{label_w}\" y=\"{}\">0</text><text x=\"{}\" y=\"{}\">even pace now</text>\
         <text x=\"{}\" y=\"{}\">{}</text></svg>",
        h - 14,
        h - 2,
        x.saturating_sub(30).max(label_w + 12),
        h - 2,
        label_w + bar_w - 60,
        h - 2,
        esc(&v.amount(v.limit_amount))
    );
}
