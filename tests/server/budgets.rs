//! `GET /budgets` and the status page's Budgets panel against the real server: each budget's
//! biggest spenders, with the figures `GET /counters` gives for the same descriptors (exact),
//! money in its currency, a hostile tenant name escaped, and a page that stays small with
//! 1,000 tenants.

use std::sync::Arc;
use std::time::Instant;

use crate::support::server::*;
use tollgate::base::clock::SystemClock;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::service::settings::Settings;
use tollgate::store::memory::MemoryStore;

const CONFIG: &str = "\
domain: llm
prices:
  currency: EUR
  per_million_tokens:
    m: {input: 2, output: 8}
descriptors:
  - key: team
    hierarchical: true
    rate_limit: {name: team-month, calendar: month, spend: 10, overdraft: true}
  - key: tokens
    rate_limit: {name: tokens-month, calendar: month, requests_per_unit: 1000000}
";

const HOSTILE: &str = "<b>x</b>&\"'";

fn spend(team: &str, input: u64, output: u64) -> Vec<tollgate::pb::common::RateLimitDescriptor> {
    let mut out = Vec::new();
    for (kind, n) in [("input", input), ("output", output)] {
        let mut d = descriptor(&[("team", team), ("model", "m"), ("kind", kind)]);
        d.hits_addend = Some(n);
        out.push(d);
    }
    out
}

async fn json(url: String) -> serde_json::Value {
    let resp = http_client().get(&url).send().await.expect("GET");
    assert_eq!(resp.status(), 200, "{url}");
    resp.json().await.expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_biggest_spenders_are_shown_with_the_counters_figures() {
    // The wall clock, so the calendar month the budgets show is this one.
    let store = Arc::new(MemoryStore::new(Arc::new(SystemClock)));
    let server = start_with_store(CONFIG, Settings::default().into(), store).await;
    let mut client = server.client().await;
    // Five heavy teams (the hostile name among them), 1,000 light ones.
    let heavy = ["acme", "globex", "initech", HOSTILE, "umbrella"];
    for (i, t) in heavy.iter().enumerate() {
        for _ in 0..5 - i {
            let resp = client
                .should_rate_limit(request("llm", spend(t, 10_000, 2_000)))
                .await
                .expect("answered")
                .into_inner();
            assert_eq!(resp.overall_code, Code::Ok as i32);
        }
        let mut d = descriptor(&[("tokens", t)]);
        d.hits_addend = Some(1_000 * (5 - i as u64));
        client
            .should_rate_limit(request("llm", vec![d]))
            .await
            .expect("answered");
    }
    for j in 0..1000 {
        client
            .should_rate_limit(request("llm", spend(&format!("light{j}"), 1, 0)))
            .await
            .expect("answered");
    }

    let body = json(server.http_url("/budgets?n=5")).await;
    let budgets = body["budgets"].as_array().expect("budgets");
    assert_eq!(budgets.len(), 2, "{body}");
    let team = budgets
        .iter()
        .find(|b| b["limit"] == "team-month")
        .expect("team-month");
    assert_eq!(team["currency"], "EUR");
    assert_eq!(team["limit_amount"], 10_000_000);
    let spenders = team["spenders"].as_array().expect("spenders");
    let whos: Vec<&str> = spenders
        .iter()
        .map(|s| s["who"].as_str().unwrap())
        .collect();
    let want: Vec<String> = heavy.iter().map(|t| format!("team={t}")).collect();
    assert_eq!(whos, want, "the five heavy teams, biggest first");
    // 10,000 input at EUR 2/M + 2,000 output at 8/M = 36,000 µEUR a call.
    assert_eq!(spenders[0]["used"], 5 * 36_000);
    for s in spenders {
        let who = s["who"].as_str().unwrap();
        let value = who.strip_prefix("team=").unwrap();
        let q = format!("/counters?domain=llm&key=team&value={}", urlencoding(value));
        let counters = json(server.http_url(&q)).await;
        let c = &counters["counters"][0];
        assert_eq!(c["name"], "team-month", "{counters}");
        assert_eq!(s["used"], c["used"], "{who}");
        assert_eq!(s["remaining"], c["remaining"], "{who}");
        assert_eq!(s["runs_out"], "no rate yet");
    }
    let tokens = budgets
        .iter()
        .find(|b| b["limit"] == "tokens-month")
        .expect("tokens-month");
    assert!(tokens.get("currency").is_none());
    assert_eq!(tokens["spenders"][0]["who"], "tokens=acme");
    assert_eq!(tokens["spenders"][0]["used"], 5_000);

    // The page: the same figures, the hostile name escaped, small with 1,000 tenants.
    let t = Instant::now();
    let page = http_client()
        .get(server.http_url("/"))
        .send()
        .await
        .expect("GET /")
        .text()
        .await
        .expect("page");
    let took = t.elapsed();
    println!(
        "status page with 1,005 teams charged: {} bytes in {took:?}",
        page.len()
    );
    assert!(page.len() < 100_000, "{} bytes", page.len());
    let panel = &page[page.find("id=\"budgets\"").expect("the Budgets panel")..];
    assert!(panel.contains("<svg"), "a chart");
    assert!(!page.contains(HOSTILE), "escaped");
    assert!(panel.contains("team=&lt;b&gt;x&lt;/b&gt;&amp;&quot;&#39;"));
    assert!(panel.contains(&format!("data-used=\"{}\"", 5 * 36_000)));
    assert!(panel.contains("0.18 EUR"), "money in its currency");

    let bad = http_client()
        .get(server.http_url("/budgets?n=0"))
        .send()
        .await
        .expect("GET");
    assert_eq!(bad.status(), 400);
    server.stop().await;
}

/// Percent-encodes every byte but unreserved ones.
fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
