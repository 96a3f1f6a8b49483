//! Reservations through a real Envoy, on every store: a generation reserves its `max_tokens`
//! (`x-max-tokens`) when it arrives, and Envoy's call when the stream is done settles it with
//! the tokens the response used (see [`super::fixture::reserve_limits`]). Generations are the
//! backend's held streams; the tokens a response used are its `x-completion-tokens`.
//!
//! - 20 generations of 100 tokens started together against 1,000 an hour: 10 admitted while
//!   they run, and the spend never passes the budget;
//! - a settle below the estimate gives the rest back, one above lands the excess;
//! - a client that disconnects mid-stream is settled with what the response's metadata holds;
//!   a response without usage sends no settle, and the estimate stays charged;
//! - a request without `x-max-tokens` is charged the domain's default estimate, or refused in
//!   a domain without one.

use std::time::Duration;

use tokio::time::Instant;

use super::fixture::{fixture, unique, Side};
use super::slots::generation_with;
use crate::support::server::http_client;

/// How long a test waits for Envoy's stream-done call to reach tollgate.
const SETTLE_WAIT: Duration = Duration::from_secs(5);

/// What tollgate's counter of `tenant` in `domain` holds (`GET /counters`).
async fn used(side: &Side, domain: &str, tenant: &str) -> u64 {
    let url = format!(
        "{}/counters?domain={domain}&descriptor=tenant={tenant}",
        side.tollgate.http_url
    );
    let body: serde_json::Value = http_client()
        .get(&url)
        .send()
        .await
        .expect("GET /counters")
        .json()
        .await
        .expect("JSON");
    body["counters"][0]["used"]
        .as_u64()
        .unwrap_or_else(|| panic!("{body}"))
}

/// Waits until the counter holds `want` (the settle comes after the client's last byte).
async fn wait_used(side: &Side, domain: &str, tenant: &str, want: u64) {
    let deadline = Instant::now() + SETTLE_WAIT;
    loop {
        let got = used(side, domain, tenant).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "[{}] {domain} {tenant}: {got} used, expected {want}",
            side.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_generations_together_never_spend_past_the_budget() {
    let fx = fixture().await;
    for side in &fx.sides {
        let name = side.name();
        let tenant = unique("tenant");
        let url = side.url("/reserve/default");
        let headers = [
            ("x-tenant", tenant.as_str()),
            ("x-max-tokens", "100"),
            ("x-completion-tokens", "100"),
        ];
        let starts = (0..20).map(|_| generation_with(&url, &headers));
        let started = futures::future::join_all(starts).await;
        let (running, refused): (Vec<_>, Vec<_>) = started.into_iter().partition(Result::is_ok);
        assert_eq!(
            (running.len(), refused.len()),
            (10, 10),
            "[{name}] 10 of 100 fit a budget of 1,000 while they run"
        );
        assert!(refused.iter().all(|r| r.as_ref().err() == Some(&429)));
        assert_eq!(used(side, "llm-reserve", &tenant).await, 1000);
        for g in running {
            g.expect("running").finish().await;
        }
        wait_used(side, "llm-reserve", &tenant, 1000).await;
        // Spent: nothing more fits.
        assert_eq!(
            generation_with(&url, &headers).await.err(),
            Some(429),
            "[{name}] the budget is spent"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_makes_the_reservation_the_actual_use() {
    let fx = fixture().await;
    for side in &fx.sides {
        let tenant = unique("tenant");
        let url = side.url("/reserve/default");
        // Below the estimate: 300 reserved, 120 used.
        let g = generation_with(
            &url,
            &[
                ("x-tenant", &tenant),
                ("x-max-tokens", "300"),
                ("x-completion-tokens", "120"),
            ],
        )
        .await
        .expect("fits");
        assert_eq!(used(side, "llm-reserve", &tenant).await, 300);
        g.finish().await;
        wait_used(side, "llm-reserve", &tenant, 120).await;
        // Above: 100 reserved, 250 used; the excess lands past the estimate.
        let g = generation_with(
            &url,
            &[
                ("x-tenant", &tenant),
                ("x-max-tokens", "100"),
                ("x-completion-tokens", "250"),
            ],
        )
        .await
        .expect("fits");
        g.finish().await;
        wait_used(side, "llm-reserve", &tenant, 370).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_settles_with_what_the_metadata_holds_and_no_usage_keeps_the_estimate() {
    let fx = fixture().await;
    for side in &fx.sides {
        let tenant = unique("tenant");
        let url = side.url("/reserve/default");
        // The usage came with the response's headers: a disconnect still settles with it.
        let g = generation_with(
            &url,
            &[
                ("x-tenant", &tenant),
                ("x-max-tokens", "400"),
                ("x-completion-tokens", "40"),
            ],
        )
        .await
        .expect("fits");
        g.disconnect();
        wait_used(side, "llm-reserve", &tenant, 40).await;
        // No usage in the response: Envoy sends no settle, the estimate stays.
        let g = generation_with(&url, &[("x-tenant", &tenant), ("x-max-tokens", "200")])
            .await
            .expect("fits");
        g.finish().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        wait_used(side, "llm-reserve", &tenant, 240).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_an_estimate_is_charged_the_default_or_refused() {
    let fx = fixture().await;
    for side in &fx.sides {
        let name = side.name();
        let tenant = unique("tenant");
        let g = generation_with(
            &side.url("/reserve/default"),
            &[("x-tenant", &tenant), ("x-completion-tokens", "30")],
        )
        .await
        .expect("the default estimate fits");
        assert_eq!(used(side, "llm-reserve", &tenant).await, 100);
        g.finish().await;
        wait_used(side, "llm-reserve", &tenant, 30).await;
        let refused = generation_with(
            &side.url("/reserve/strict"),
            &[("x-tenant", &tenant), ("x-completion-tokens", "30")],
        )
        .await;
        assert_eq!(refused.err(), Some(429), "[{name}] no estimate, no default");
        assert_eq!(used(side, "llm-reserve-strict", &tenant).await, 0);
        let g = generation_with(
            &side.url("/reserve/strict"),
            &[
                ("x-tenant", &tenant),
                ("x-max-tokens", "50"),
                ("x-completion-tokens", "30"),
            ],
        )
        .await
        .expect("with an estimate it fits");
        g.finish().await;
        wait_used(side, "llm-reserve-strict", &tenant, 30).await;
    }
}
