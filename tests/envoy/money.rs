//! A money budget through a real Envoy, on every store: the request is checked (cost 0) with
//! its tenant and model, and when its stream is done Envoy sends its input and output tokens
//! as two descriptors (`kind=input`, `kind=output`) from response metadata, which tollgate
//! prices and charges in one decision (see [`super::fixture::money_limits`]). USD 0.10 an hour:
//! o1 at USD 15/60 per million input/output tokens.

use std::time::Duration;

use tokio::time::Instant;

use super::fixture::{fixture, unique, Side};
use crate::support::binary::BIN;
use crate::support::server::http_client;

/// `GET /money` as `tenant` with `model`, `input` and `output` tokens used: the status, once
/// the response is read to its end.
async fn call(side: &Side, tenant: &str, model: &str, input: u64, output: u64) -> u16 {
    let resp = http_client()
        .get(side.url("/money"))
        .header("x-tenant", tenant)
        .header("x-model", model)
        .header("x-prompt-tokens", input.to_string())
        .header("x-completion-tokens", output.to_string())
        .send()
        .await
        .expect("GET /money");
    let status = resp.status().as_u16();
    resp.bytes().await.expect("the body");
    status
}

/// What `tenant` has spent, in micro-USD (`GET /counters`), once it reaches `want`.
async fn wait_spent(side: &Side, tenant: &str, want: u64) {
    let url = format!(
        "{}/counters?domain=llm-money&descriptor=tenant={tenant}",
        side.tollgate.http_url
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let body: serde_json::Value = http_client()
            .get(&url)
            .send()
            .await
            .expect("GET /counters")
            .json()
            .await
            .expect("JSON");
        let used = body["counters"][0]["used"].as_u64();
        if used == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "[{}] {tenant}: {body}, expected {want} used",
            side.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `tenant`'s 150,000 µUSD of a 100,000 budget, as `GET /counters`, `tollgate counters` and the
/// status page show them.
async fn operator_sees(side: &Side, tenant: &str) {
    let q = format!("domain=llm-money&descriptor=tenant={tenant}");
    let body: serde_json::Value = http_client()
        .get(format!("{}/counters?{q}", side.tollgate.http_url))
        .send()
        .await
        .expect("GET /counters")
        .json()
        .await
        .expect("JSON");
    let c = &body["counters"][0];
    assert_eq!(
        (
            c["used"].as_u64(),
            c["limit"].as_u64(),
            c["currency"].as_str()
        ),
        (Some(150_000), Some(100_000), Some("USD")),
        "{body}"
    );
    let out = std::process::Command::new(BIN)
        .args([
            "counters",
            "--addr",
            &side.tollgate.http_url,
            "--domain",
            "llm-money",
        ])
        .args(["--descriptor", &format!("tenant={tenant}")])
        .output()
        .expect("tollgate counters");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    let row = table.lines().nth(1).unwrap_or_default().to_string();
    for cell in ["0.1 USD", "0.15 USD", "0 USD", "0.05 USD"] {
        assert!(row.contains(cell), "{cell} in {table}");
    }
    let page = http_client()
        .get(format!("{}/?{q}", side.tollgate.http_url))
        .send()
        .await
        .expect("the status page")
        .text()
        .await
        .expect("HTML");
    assert!(page.contains("<td>0.15 USD</td>"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_is_refused_once_its_money_budget_is_spent() {
    let fx = fixture().await;
    for side in &fx.sides {
        let name = side.name();
        let tenant = unique("tenant");
        // 1,000 o1 input tokens (15,000 µUSD) and 1,000 output (60,000): 75,000 of 100,000.
        assert_eq!(call(side, &tenant, "o1", 1000, 1000).await, 200, "[{name}]");
        wait_spent(side, &tenant, 75_000).await;
        // 25,000 left: the next call is admitted and its usage lands past the budget.
        assert_eq!(call(side, &tenant, "o1", 1000, 1000).await, 200, "[{name}]");
        wait_spent(side, &tenant, 150_000).await;
        // The operator reads spend as money: the JSON in micro-units with its currency, the
        // table and the status page in USD.
        operator_sees(side, &tenant).await;
        // Spent: refused at the request, whatever the model.
        assert_eq!(call(side, &tenant, "o1", 1, 1).await, 429, "[{name}]");
        assert_eq!(
            call(side, &tenant, "gpt-4o-mini", 1, 1).await,
            429,
            "[{name}]"
        );
        // Another tenant: 10,000 mini input (1,500) and 10,000 output (6,000) tokens.
        let other = unique("tenant");
        assert_eq!(call(side, &other, "gpt-4o-mini", 10_000, 10_000).await, 200);
        wait_spent(side, &other, 7_500).await;
        // A model the prices do not know is refused before it runs, and charges nothing.
        assert_eq!(call(side, &other, "mystery", 1, 1).await, 429, "[{name}]");
        wait_spent(side, &other, 7_500).await;
    }
}
