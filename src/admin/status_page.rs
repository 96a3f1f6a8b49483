//! The status page (`GET /` on the admin port, off with `--admin-ui=false`): readiness and why,
//! the store and its latency over the last minute, where the config comes from and the last
//! reload error, who is being limited right now with OVER_LIMIT per minute, a counter lookup
//! form, each budget's biggest spenders with a chart (`admin::budgets`), every shared pool
//! divided by class or tenant with each class's use and the active tenants, and every domain's
//! limits in their own terms.
//!
//! One HTML document rendered here: the style is inline, nothing is fetched (no script, font
//! or image), so it reads the same without JavaScript, offline and behind any proxy. Every
//! value that came from a config or a caller goes through `html::esc`; descriptor values also
//! through the log's length bound.

use std::fmt::Write as _;

use crate::admin::counters::{self, CounterView, Selector};
use crate::admin::html::esc;
use crate::admin::state::{AdminState, Readiness};
use crate::config::{Config, Level, Pattern};
use crate::store::Store;

const STYLE: &str = "\
body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:0;background:#f6f7f9;color:#1d2430}\
header{background:#1d2430;color:#fff;padding:14px 24px;display:flex;gap:16px;align-items:center}\
header h1{margin:0;font-size:22px}main{padding:8px 24px 32px;max-width:1100px}\
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin:14px 0}\
h2{font-size:17px;margin:0 0 8px}table{border-collapse:collapse;width:100%;font-size:13px}\
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eef0f3;vertical-align:top}\
th{background:#f0f2f5}.ok{background:#1f8a4c}.bad{background:#c0392b}.warn{color:#a15c00}\
.badge{color:#fff;padding:3px 10px;border-radius:10px;font-weight:bold;font-size:13px}\
code,pre{font-family:'DejaVu Sans Mono',monospace;font-size:12px}pre{white-space:pre-wrap;margin:4px 0}\
.muted{color:#66707d}form input,form select{font-size:13px;padding:3px;margin:2px}\
.bar{fill:#c0392b}.axis{stroke:#99a;stroke-width:1}svg text{font-size:10px;fill:#66707d}";

/// What the page shows besides the state it reads itself.
pub struct PageInput<'a> {
    /// The lookup form's query, when it was submitted.
    pub lookup: Option<&'a str>,
}

/// The whole page.
pub async fn render<S: Store>(st: &AdminState<S>, input: PageInput<'_>) -> String {
    let config = st.config.load_full();
    let mut page = String::with_capacity(16 * 1024);
    page.push_str("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width\">");
    let _ = write!(
        page,
        "<title>tollgate status</title><style>{STYLE}</style></head><body>"
    );
    header(st, &mut page);
    page.push_str("<main>");
    store_section(st, &mut page);
    config_section(st, &config, &mut page);
    lookup_section(st, &config, input.lookup, &mut page).await;
    crate::admin::top_page::section(st, &config, &mut page);
    crate::admin::budgets::section(st, &config, &mut page).await;
    pools_section(st, &config, &mut page).await;
    limits_section(&config, &mut page);
    page.push_str("</main></body></html>\n");
    page
}

fn header<S: Store>(st: &AdminState<S>, page: &mut String) {
    page.push_str("<header><h1>tollgate</h1>");
    match st.readiness() {
        Readiness::Ready { warning } => {
            page.push_str("<span class=\"badge ok\" id=\"readiness\">READY</span>");
            if let Some(w) = warning {
                let _ = write!(page, "<span>warning: {}</span>", esc(&w));
            }
        }
        Readiness::NotReady(why) => {
            let _ = write!(
                page,
                "<span class=\"badge bad\" id=\"readiness\">NOT READY</span><span>{}</span>",
                esc(&why)
            );
        }
    }
    page.push_str("</header>");
}

fn store_section<S: Store>(st: &AdminState<S>, page: &mut String) {
    let store = st.limiter.store();
    let _ = write!(
        page,
        "<section id=\"store\"><h2>Store</h2><p>Kind: <b>{}</b>. ",
        esc(store.name())
    );
    match st.limiter.store_latency().summary() {
        Some(s) => {
            let _ = write!(
                page,
                "Latency over the last minute ({} decisions): p50 <b>{}</b>, p99 <b>{}</b>.",
                s.samples,
                millis(s.p50),
                millis(s.p99)
            );
        }
        None => page.push_str("No decision reached the store in the last minute."),
    }
    page.push_str("</p>");
    let leases = store.leases();
    if !leases.is_empty() {
        page.push_str(
            "<h3>Global limits</h3><table><tr><th>limit</th><th>region</th><th>window</th>\
             <th>lease</th><th>of it safe share</th><th>lapses in</th><th>issued by home</th></tr>",
        );
        for l in &leases {
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{}</td>",
                esc(&l.id),
                esc(&l.region)
            );
            match l.window {
                Some((w, units, safe, left)) => {
                    let _ = write!(
                        page,
                        "<td>{w}</td><td>{units}</td><td>{safe}</td><td>{left} ms</td>"
                    );
                }
                None => page.push_str("<td colspan=\"4\">no lease now</td>"),
            }
            match l.issued {
                Some((n, ago)) => {
                    let _ = write!(page, "<td>{n} ({ago} ms ago)</td></tr>");
                }
                None => page.push_str("<td>not asked by this instance</td></tr>"),
            }
        }
        page.push_str("</table>");
    }
    page.push_str("</section>");
}

fn millis(d: std::time::Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn config_section<S: Store>(st: &AdminState<S>, config: &Config, page: &mut String) {
    let status = &st.reload_status;
    let _ = write!(
        page,
        "<section id=\"config\"><h2>Config</h2><p>Source: <code>{}</code>. Generation {}",
        esc(&st.config_source),
        status.generation()
    );
    if let Some((_, xds)) = &st.xds {
        let version = xds.version().unwrap_or_else(|| "none yet".into());
        let _ = write!(page, ", xDS version <code>{}</code>", esc(&version));
    }
    let _ = write!(page, ". {} domain(s).</p>", config.domains.len());
    match status.last_error() {
        Some(e) => {
            let _ = write!(
                page,
                "<p class=\"warn\" id=\"reload-error\">The last reload was rejected (the limits \
                 below still run): <code>{}</code></p>",
                esc(&e)
            );
        }
        None => page.push_str("<p class=\"muted\">The last reload, if any, was accepted.</p>"),
    }
    page.push_str("</section>");
}

/// The domains, sorted.
fn domains(config: &Config) -> Vec<&str> {
    let mut names: Vec<&str> = config.domains.keys().map(String::as_str).collect();
    names.sort_unstable();
    names
}

async fn lookup_section<S: Store>(
    st: &AdminState<S>,
    config: &Config,
    query: Option<&str>,
    page: &mut String,
) {
    let selected = query.and_then(|q| counters::parse_query(q).ok());
    page.push_str(
        "<section id=\"lookup\"><h2>Counter lookup</h2>\
         <form method=\"get\" action=\"/\"><label>Domain <select name=\"domain\">",
    );
    for d in domains(config) {
        let chosen = selected.as_ref().is_some_and(|s| s.domain == d);
        let _ = write!(
            page,
            "<option{}>{}</option>",
            if chosen { " selected" } else { "" },
            esc(d)
        );
    }
    page.push_str("</select></label><br>");
    for i in 0..4 {
        let (k, v) = selected
            .as_ref()
            .and_then(|s| s.entries.get(i))
            .map_or(("", ""), |(k, v)| (k.as_str(), v.as_str()));
        let _ = write!(
            page,
            "<input name=\"key\" placeholder=\"key\" value=\"{}\"> = \
             <input name=\"value\" placeholder=\"value\" value=\"{}\"><br>",
            esc(k),
            esc(v)
        );
    }
    page.push_str("<button type=\"submit\">Look up</button></form>");
    if let Some(q) = query {
        match counters::parse_query(q) {
            Err(e) => {
                let _ = write!(page, "<p class=\"warn\">{}</p>", esc(&e.to_string()));
            }
            Ok(sel) => {
                let found =
                    counters::inspect(config, &**st.limiter.store(), st.limiter.bounds(), &sel)
                        .await;
                match found {
                    Ok(views) => counter_table(&sel, &views, page),
                    Err(e) => {
                        let _ = write!(page, "<p class=\"warn\">{}</p>", esc(&e.to_string()));
                    }
                }
            }
        }
    }
    page.push_str("</section>");
}

fn counter_table(sel: &Selector, views: &[CounterView], page: &mut String) {
    let _ = write!(
        page,
        "<p>Domain <code>{}</code>, descriptor <code>{}</code>:</p>",
        esc(&sel.domain),
        esc(&sel.printable_descriptor())
    );
    if views.is_empty() {
        page.push_str("<p id=\"counters\">No limit applies to that descriptor.</p>");
        return;
    }
    page.push_str(
        "<table id=\"counters\"><tr><th>limit</th><th>algorithm</th><th>window</th>\
         <th>limit</th><th>used</th><th>left</th><th>resets in</th><th>debt</th>\
         <th>lease</th><th>key</th></tr>",
    );
    for v in views {
        let mut name = esc(&v.name);
        if v.shared {
            name.push_str(" <span class=\"muted\">(shared)</span>");
        }
        if v.role != "enforced" {
            let _ = write!(name, " <span class=\"muted\">({})</span>", v.role);
        }
        let _ = write!(
            page,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{} s</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            v.algorithm,
            esc(&v.window),
            esc(&v.amount(v.limit)),
            esc(&v.amount(v.used)),
            esc(&v.amount(v.remaining)),
            v.reset_after_s,
            esc(&v.amount(v.overdraft_debt)),
            v.lease,
            esc(&crate::base::log_throttle::printable(&v.key))
        );
    }
    page.push_str("</table>");
}

/// The most pools the page reads (each is one read of the store).
const MAX_POOLS: usize = 20;

/// Every shared pool with `shares:` or `fair_share:`: the pool's use, each class's beside its
/// guarantee, and the tenants active in the window, read as `/counters` reads them.
async fn pools_section<S: Store>(st: &AdminState<S>, config: &Config, page: &mut String) {
    let mut pools = Vec::new();
    for d in domains(config) {
        divided_pools(&config.domains[d].root, &mut Vec::new(), &mut |entries| {
            pools.push(Selector {
                domain: d.to_string(),
                entries,
                limit: None,
            })
        });
    }
    if pools.is_empty() {
        return;
    }
    page.push_str(
        "<section id=\"pools\"><h2>Shared pools</h2><table><tr><th>pool</th><th>counter</th>\
         <th>limit</th><th>used</th><th>left</th><th>resets in</th></tr>",
    );
    let more = pools.len().saturating_sub(MAX_POOLS);
    let mut charts = Vec::new();
    for sel in pools.iter().take(MAX_POOLS) {
        let store = &**st.limiter.store();
        let views = match counters::inspect(config, store, st.limiter.bounds(), sel).await {
            Ok(views) => views,
            Err(e) => {
                let _ = write!(
                    page,
                    "<tr><td><code>{}</code></td><td colspan=\"5\" class=\"warn\">{}</td></tr>",
                    esc(&sel.printable_descriptor()),
                    esc(&e.to_string())
                );
                continue;
            }
        };
        // A pool, its classes and its active tenants; not the empty tenant the selector names.
        let shown: Vec<&CounterView> = views
            .iter()
            .filter(|v| v.shared && !v.name.ends_with("/tenant"))
            .collect();
        charts.push((
            format!("{}.{}", sel.domain, sel.printable_descriptor()),
            shown
                .iter()
                .map(|v| (v.name.clone(), v.used, v.limit))
                .collect::<Vec<_>>(),
        ));
        for v in shown {
            let _ = write!(
                page,
                "<tr><td><code>{}.{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{} s</td></tr>",
                esc(&sel.domain),
                esc(&sel.printable_descriptor()),
                esc(&v.name),
                esc(&v.amount(v.limit)),
                esc(&v.amount(v.used)),
                esc(&v.amount(v.remaining)),
                v.reset_after_s
            );
        }
    }
    page.push_str("</table>");
    if more > 0 {
        let _ = write!(page, "<p class=\"muted\">{more} more not shown.</p>");
    }
    for (name, rows) in &charts {
        let _ = write!(page, "<h3>{}</h3>", esc(name));
        bars(rows, page);
    }
    page.push_str("</section>");
}

/// One bar per row: its use against its limit (a pool, each class against its guarantee, the
/// active tenants against the most counted).
fn bars(rows: &[(String, u64, u64)], page: &mut String) {
    let (label_w, bar_w, row) = (170u64, 420u64, 18u64);
    let _ = write!(
        page,
        "<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"use against the limit\">",
        label_w + bar_w + 90,
        row * rows.len() as u64 + 4
    );
    for (i, (name, used, limit)) in rows.iter().enumerate() {
        let y = i as u64 * row;
        let w = (*used).min(*limit) * bar_w / (*limit).max(1);
        let _ = write!(
            page,
            "<text x=\"0\" y=\"{}\">{}</text><rect x=\"{label_w}\" y=\"{}\" width=\"{bar_w}\" \
             height=\"{}\" fill=\"#eef0f3\"/><rect x=\"{label_w}\" y=\"{}\" width=\"{w}\" \
             height=\"{}\" fill=\"#2e6fbd\"><title>{used} of {limit}</title></rect>\
             <text x=\"{}\" y=\"{}\">{used} / {limit}</text>",
            y + 12,
            esc(name),
            y + 2,
            row - 4,
            y + 2,
            row - 4,
            label_w + bar_w + 6,
            y + 12
        );
    }
    page.push_str("</svg>");
}

/// Calls `found` with a descriptor reaching each rule of `level` (and below) that holds a
/// divided shared pool: each pattern's value (an exact one, a wildcard's literal parts, or
/// `-` for any value; a shared counter is the same for every value the rule matches).
fn divided_pools(
    level: &Level,
    path: &mut Vec<(String, String)>,
    found: &mut dyn FnMut(Vec<(String, String)>),
) {
    for rule in level.rules() {
        let value = match &rule.pattern {
            Pattern::Exact(v) => v.clone(),
            Pattern::Wildcard(parts) => parts.concat(),
            Pattern::Any => "-".to_string(),
        };
        path.push((rule.key.clone(), value));
        let divided = rule
            .limits
            .iter()
            .any(|l| l.shared && (l.shares.is_some() || l.fair_share.is_some()));
        if divided {
            found(path.clone());
        }
        divided_pools(&rule.children, path, found);
        path.pop();
    }
}

fn limits_section(config: &Config, page: &mut String) {
    page.push_str(
        "<section id=\"limits\"><h2>Domains and limits</h2><p>Each limit in its \
         own terms; envoyproxy/ratelimit's lines are at <a href=\"rlconfig\">/rlconfig</a>.</p>",
    );
    let described = config.explain();
    for d in domains(config) {
        let prefix = format!("{d}.");
        let lines: Vec<&str> = described
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .collect();
        let _ = write!(
            page,
            "<details open><summary><b>{}</b> — {} limit(s)</summary><pre>",
            esc(d),
            lines.len()
        );
        for l in lines {
            page.push_str(&esc(l));
            page.push('\n');
        }
        page.push_str("</pre></details>");
    }
    page.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn escaping_leaves_no_markup() {
        assert_eq!(
            esc("<script>alert(\"x\")</script>&'"),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
    }
}
