//! Envoy's LLM token pattern, end to end: a check of cost 0 when the request arrives
//! (`hits_addend: {number: 0}`), and the response's tokens charged when the stream ends
//! (`apply_on_stream_done: true`, the count taken from the response into dynamic metadata).
//! The config is plain envoyproxy/ratelimit (100 tokens an hour per tenant) and completions
//! use 60 tokens: in a usage domain (`--usage-domains`) the second charge lands past the limit
//! and the third request is refused; outside one that charge does not fit, charges nothing,
//! and the tenant is never stopped.

use std::time::Duration;

use prometheus_parse::{Scrape, Value};
use tokio::time::Instant;

use super::enforce::{get, within_one_hour};
use super::fixture::{fixture, unique, Side};
use crate::support::envoy::Backend;
use crate::support::server::http_client;

/// tollgate's `tollgate_limit_<what>_total` summed over `domain`'s limits and results:
/// `decisions` counts every call that reached the limit, `hits` their costs.
async fn count(side: &Side, what: &str, domain: &str) -> u64 {
    let text = http_client()
        .get(format!("{}/metrics", side.tollgate.http_url))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text");
    let name = format!("tollgate_limit_{what}_total");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && s.labels.get("domain") == Some(domain))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Untyped(v) => v as u64,
            _ => 0,
        })
        .sum()
}

/// Waits (up to 5 s) until tollgate has seen `decisions` calls in `domain` (Envoy makes the
/// stream-done call after it answered the client).
async fn wait_decisions(side: &Side, domain: &str, decisions: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = count(side, "decisions", domain).await;
        if seen == decisions {
            return;
        }
        assert!(
            seen < decisions && Instant::now() < deadline,
            "[{}] {domain}: {seen} calls, expected {decisions}",
            side.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One model call of 60 tokens for `tenant` through `/llm/<kind>`: (status, reached the model).
async fn completion(side: &Side, kind: &str, tenant: &str) -> (u16, bool) {
    let id = unique("completion");
    let (status, _) = get(
        &side.url(&format!("/llm/{kind}")),
        &[
            ("x-tenant", tenant),
            ("x-completion-tokens", "60"),
            ("x-test-id", &id),
        ],
    )
    .await;
    (status, Backend::get().saw(&id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_domain_stops_the_tenant_at_its_token_budget() {
    let fx = fixture().await;
    within_one_hour().await;
    for side in &fx.sides {
        let (name, tenant) = (side.name(), unique("tenant"));
        let domain = "llm-usage";
        assert_eq!(
            completion(side, "usage", &tenant).await,
            (200, true),
            "[{name}] first"
        );
        wait_decisions(side, domain, 2).await;
        assert_eq!(count(side, "hits", domain).await, 60, "[{name}]");
        // 60 tokens against 40 left: recorded anyway (the budget is now 20 in debt).
        assert_eq!(
            completion(side, "usage", &tenant).await,
            (200, true),
            "[{name}] second"
        );
        wait_decisions(side, domain, 4).await;
        assert_eq!(count(side, "hits", domain).await, 120, "[{name}]");
        assert_eq!(
            completion(side, "usage", &tenant).await,
            (429, false),
            "[{name}] the third request: the budget is spent"
        );
        // The refused request had no response, so no token count: Envoy sends no stream-done
        // call for it, and nothing more is charged.
        wait_decisions(side, domain, 5).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(count(side, "decisions", domain).await, 5, "[{name}]");
        assert_eq!(count(side, "hits", domain).await, 120, "[{name}]");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_usage_domains_a_charge_that_does_not_fit_charges_nothing() {
    let fx = fixture().await;
    within_one_hour().await;
    for side in &fx.sides {
        let (name, tenant) = (side.name(), unique("tenant"));
        let domain = "llm-plain";
        for (i, calls) in [(1, 2), (2, 4), (3, 6)] {
            // tollgate's rule outside usage domains: the stream-done charge of 60 against 40
            // left is refused and lands nothing, so the checks keep passing (the reason usage
            // domains exist).
            assert_eq!(
                completion(side, "plain", &tenant).await,
                (200, true),
                "[{name}] completion {i}"
            );
            wait_decisions(side, domain, calls).await;
        }
    }
}
