//! Money budgets on every store: a `spend:` limit charged each descriptor's tokens at its
//! model's and kind's price, in micro-units, rounded up once per charge; exact over a million
//! random charges of three models; refused once spent; an unknown model refused or charged the
//! default price; a reservation priced at the output price and settled to its input and output.

use std::sync::Arc;

use tollgate::base::clock::ManualClock;
use tollgate::config::load::LoadOptions;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::RateLimitResponse;
use tollgate::service::marked::{RESERVATION_KEY, RESERVE_KEY, SETTLE_KEY};
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::any::AnyStore;

use crate::support::kit::{
    for_every_store, for_stores, limiter_with, store, unique_prefix, StoreKind,
};
use crate::support::server::{descriptor, request, OK, OVER_LIMIT, T0_US};

/// Prices a million tokens, in micro-USD: (model, input, output, cached input).
const PRICES: [(&str, u64, u64, u64); 3] = [
    ("gpt-4o", 2_500_000, 10_000_000, 1_250_000),
    ("gpt-4o-mini", 150_000, 600_000, 75_000),
    ("o1", 15_000_000, 60_000_000, 7_500_000),
];

/// `llm`: USD 4,000 a calendar month per tenant (4e9 micro-USD: Envoy's u32 reports it
/// whole); `strict` has no default price, `fallback` prices unknown models at USD 20/M.
const CONFIG: &str = "\
domain: llm
prices:
  currency: USD
  per_million_tokens:
    gpt-4o: {input: 2.50, output: 10, cached_input: 1.25}
    gpt-4o-mini: {input: 0.15, output: 0.60, cached_input: \"0.075\"}
    o1: {input: 15, output: 60, cached_input: 7.5}
descriptors:
  - key: tenant
    hierarchical: true
    rate_limit: {name: tenant-monthly-spend, calendar: month, spend: 4000}
  - key: small
    hierarchical: true
    rate_limit: {name: small-spend, unit: hour, spend: 0.01}
";

const FALLBACK: &str = "\
domain: fallback
prices:
  per_million_tokens:
    gpt-4o-mini: {input: 0.15, output: 0.60}
  default: {input: 5, output: 20}
descriptors:
  - key: tenant
    hierarchical: true
    rate_limit: {unit: hour, spend: 1}
";

fn costing(mut d: RateLimitDescriptor, cost: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(cost);
    d
}

fn usage(tenant: &str, model: &str, kind: &str, tokens: u64) -> RateLimitDescriptor {
    costing(
        descriptor(&[("tenant", tenant), ("model", model), ("kind", kind)]),
        tokens,
    )
}

async fn ask(
    l: &RateLimiter<AnyStore>,
    domain: &str,
    ds: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    l.should_rate_limit(&request(domain, ds))
        .await
        .expect("a decision")
}

/// What is left of a `key=value` spend limit in `domain`, in micro-units.
async fn left(l: &RateLimiter<AnyStore>, domain: &str, key: &str, value: &str) -> u64 {
    let r = ask(l, domain, vec![costing(descriptor(&[(key, value)]), 0)]).await;
    u64::from(r.statuses[0].limit_remaining)
}

/// Micro-USD `tokens` cost at `per_million`, as docs/configuration.md states the rule: the
/// exact product, rounded up to a micro-unit.
fn expected(tokens: u64, per_million: u64) -> u64 {
    (u128::from(tokens) * u128::from(per_million)).div_ceil(1_000_000) as u64
}

async fn limiter(kind: StoreKind, clock: &ManualClock) -> RateLimiter<AnyStore> {
    limiter_with(
        &[CONFIG, FALLBACK],
        &LoadOptions::default(),
        Settings::default(),
        store(kind, clock).await,
    )
}

/// A million charges (250,000 requests of 4 descriptors, 32 at a time), three models and three
/// token kinds, 1 to 60 tokens each: the month's counter holds exactly Σ of each charge's cost.
async fn million(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let l = Arc::new(limiter(kind, &clock).await);
    let tenant = unique_prefix();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut total = 0u64;
    let mut batches = Vec::new();
    for _ in 0..250_000 / 32 + 1 {
        let mut batch = Vec::new();
        for _ in 0..32 {
            let mut ds = Vec::with_capacity(4);
            for _ in 0..4 {
                let r = next();
                let (model, input, output, cached) = PRICES[(r % 3) as usize];
                let (kind, price) = match (r >> 8) % 3 {
                    0 => ("input", input),
                    1 => ("output", output),
                    _ => ("cached_input", cached),
                };
                let tokens = 1 + (r >> 16) % 60;
                total += expected(tokens, price);
                ds.push(usage(&tenant, model, kind, tokens));
            }
            batch.push(ds);
        }
        batches.push(batch);
    }
    let charges: usize = batches.iter().map(|b| b.len() * 4).sum();
    assert!(charges >= 1_000_000);
    for batch in batches {
        let asks = batch.into_iter().map(|ds| {
            let l = l.clone();
            async move { ask(&l, "llm", ds).await.overall_code }
        });
        for code in futures::future::join_all(asks).await {
            assert_eq!(code, OK);
        }
    }
    let used = 4_000_000_000 - left(&l, "llm", "tenant", &tenant).await;
    assert_eq!(used, total, "{charges} charges");
}

#[test]
fn a_million_priced_charges_sum_exactly() {
    for_stores(&[StoreKind::Memory, StoreKind::Redis], million);
}

async fn rules(kind: StoreKind) {
    let clock = ManualClock::new(T0_US - T0_US % (3_600_000_000) + 1_000_000);
    let l = limiter(kind, &clock).await;
    let t = unique_prefix();
    // USD 0.01 an hour = 10,000 µUSD. 1,000 o1 output tokens: 60,000 µUSD, refused whole.
    let small = |model: &str, kind: &str, n: u64| {
        costing(
            descriptor(&[("small", &t), ("model", model), ("kind", kind)]),
            n,
        )
    };
    let r = ask(&l, "llm", vec![small("o1", "output", 1000)]).await;
    assert_eq!(r.overall_code, OVER_LIMIT, "{r:?}");
    assert_eq!(
        left(&l, "llm", "small", &t).await,
        10_000,
        "nothing charged"
    );
    // 10,000 mini input tokens (1,500) and 5,000 output tokens (3,000), all-or-nothing together.
    let r = ask(
        &l,
        "llm",
        vec![
            small("gpt-4o-mini", "input", 10_000),
            small("gpt-4o-mini", "output", 5_000),
        ],
    )
    .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(left(&l, "llm", "small", &t).await, 5_500);
    // No kind: priced as output. 9,000 mini tokens: 5,400.
    let no_kind = costing(
        descriptor(&[("small", &t), ("model", "gpt-4o-mini")]),
        9_000,
    );
    assert_eq!(ask(&l, "llm", vec![no_kind]).await.overall_code, OK);
    assert_eq!(left(&l, "llm", "small", &t).await, 100);
    // Spent: 1,000 mini cached tokens (75) fit, the next 1,000 (75 more) do not.
    assert_eq!(
        ask(&l, "llm", vec![small("gpt-4o-mini", "cached_input", 1000)])
            .await
            .overall_code,
        OK
    );
    assert_eq!(
        ask(&l, "llm", vec![small("gpt-4o-mini", "cached_input", 1000)])
            .await
            .overall_code,
        OVER_LIMIT
    );
    assert_eq!(left(&l, "llm", "small", &t).await, 25);
    // The largest count a request may carry, at the dearest price: refused whole, no overflow.
    let huge = small("o1", "output", u64::from(u32::MAX));
    assert_eq!(ask(&l, "llm", vec![huge]).await.overall_code, OVER_LIMIT);
    assert_eq!(left(&l, "llm", "small", &t).await, 25);

    // A model the table does not name, in a domain without a default: refused, nothing
    // charged, the other descriptors too; a kind the model has no price for likewise.
    let u = unique_prefix();
    let before = left(&l, "llm", "tenant", &u).await;
    let r = ask(
        &l,
        "llm",
        vec![
            usage(&u, "gpt-4o", "input", 10),
            usage(&u, "mystery", "input", 10),
        ],
    )
    .await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER_LIMIT));
    let r = ask(&l, "llm", vec![usage(&u, "gpt-4o", "audio", 10)]).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    // A check (cost 0) naming an unknown model is refused too: before the call runs.
    let r = ask(&l, "llm", vec![usage(&u, "mystery", "input", 0)]).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    let no_model = costing(descriptor(&[("tenant", &u)]), 10);
    assert_eq!(
        ask(&l, "llm", vec![no_model]).await.overall_code,
        OVER_LIMIT
    );
    assert_eq!(left(&l, "llm", "tenant", &u).await, before);
    // With a default price: an unknown model is charged it (USD 20/M output: 1,000 → 20,000).
    let f = unique_prefix();
    let unknown = costing(descriptor(&[("tenant", &f), ("model", "mystery")]), 1000);
    assert_eq!(ask(&l, "fallback", vec![unknown]).await.overall_code, OK);
    assert_eq!(left(&l, "fallback", "tenant", &f).await, 1_000_000 - 20_000);

    // A reservation of 2,000 gpt-4o tokens is priced at the output price (20,000 µUSD), and
    // settles to the input and output it used: 1,000 in (2,500) + 500 out (5,000).
    let v = unique_prefix();
    let full = left(&l, "llm", "tenant", &v).await;
    let reserve = costing(
        descriptor(&[("tenant", &v), ("model", "gpt-4o"), (RESERVE_KEY, "")]),
        2_000,
    );
    let r = ask(&l, "llm", vec![reserve]).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(left(&l, "llm", "tenant", &v).await, full - 20_000);
    let id = match &r.dynamic_metadata.as_ref().expect("metadata").fields[RESERVATION_KEY].kind {
        Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
        other => panic!("{other:?}"),
    };
    let settle = |kind: &str, n: u64| {
        costing(
            descriptor(&[
                ("tenant", &v),
                ("model", "gpt-4o"),
                ("kind", kind),
                (SETTLE_KEY, &id),
            ]),
            n,
        )
    };
    let r = ask(
        &l,
        "llm",
        vec![settle("input", 1_000), settle("output", 500)],
    )
    .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(left(&l, "llm", "tenant", &v).await, full - 7_500);
}

#[test]
fn spend_limits_price_refuse_and_settle() {
    for_every_store(rules);
}

/// New prices reload with the config and the month's spend stays: what was charged at the old
/// price is kept, the next charge is at the new one.
async fn reload(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let store = store(kind, &clock).await;
    let old = limiter_with(
        &[CONFIG],
        &LoadOptions::default(),
        Settings::default(),
        store.clone(),
    );
    let t = unique_prefix();
    // 1,000 gpt-4o output tokens at USD 10/M: 10,000 µUSD.
    assert_eq!(
        ask(&old, "llm", vec![usage(&t, "gpt-4o", "output", 1000)])
            .await
            .overall_code,
        OK
    );
    let dearer = CONFIG.replace("output: 10,", "output: 12.5,");
    let new = limiter_with(
        &[&dearer],
        &LoadOptions::default(),
        Settings::default(),
        store,
    );
    assert_eq!(
        left(&new, "llm", "tenant", &t).await,
        4_000_000_000 - 10_000
    );
    assert_eq!(
        ask(&new, "llm", vec![usage(&t, "gpt-4o", "output", 1000)])
            .await
            .overall_code,
        OK
    );
    assert_eq!(
        left(&new, "llm", "tenant", &t).await,
        4_000_000_000 - 22_500
    );
}

#[test]
fn prices_reload_without_losing_spend() {
    for_every_store(reload);
}
