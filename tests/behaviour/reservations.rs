//! Reservations on every store: a request that reserves its estimate is charged at once,
//! all-or-nothing with its other limits (in a usage domain too), and its id settles it to the
//! actual use on every limit it charged (a minute's tokens and a calendar month's budget
//! alike): the unused part comes back, an excess lands as overdraft, a settle after the window
//! ended gives nothing back and lands the excess in the current one; a second settle, or one
//! of an id never issued, changes nothing. A request without an estimate is charged the
//! domain's default or refused. Then racing callers: 400 on the memory store, two instances ×
//! 200 on one Redis and one Redis Cluster, never more admitted than the budget holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tollgate::base::clock::ManualClock;
use tollgate::config::load::LoadOptions;
use tollgate::config::usage::UsageDomains;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::RateLimitResponse;
use tollgate::service::marked::{FALLBACK, RESERVATION_KEY, RESERVE_KEY, SETTLE_KEY};
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::any::AnyStore;

use crate::support::kit::{
    for_every_store, for_stores, limiter_with, store, two_instances, unique_prefix, StoreKind,
};
use crate::support::server::{descriptor, request, OK, OVER_LIMIT, T0_US};

const S: u64 = 1_000_000;

/// `llm`: 1,000 tokens a minute per tenant and 5,000 a calendar month (UTC), 10 requests a
/// minute, and a fixed minute, a sliding minute and a token bucket to settle on; `usage-llm`
/// is a usage domain with the same tenant limit; `strict` has no default estimate.
const CONFIG: &str = "\
domain: llm
reservations: {default_estimate: 50}
descriptors:
  - key: tenant
    hierarchical: true
    rate_limit: {unit: minute, requests_per_unit: 1000}
    descriptors:
      - key: month
        rate_limit: {unit: month, requests_per_unit: 5000, calendar: month, timezone: UTC}
  - key: requests
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token_bucket}
";

const USAGE: &str = "\
domain: usage-llm
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000}
";

const STRICT: &str = "\
domain: strict
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000}
";

fn load() -> LoadOptions {
    LoadOptions {
        usage_domains: UsageDomains::parse("usage-*").expect("globs"),
        ..LoadOptions::default()
    }
}

fn costing(mut d: RateLimitDescriptor, cost: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(cost);
    d
}

/// `entries` + the reserve mark, estimate `estimate`.
fn reserving(entries: &[(&str, &str)], estimate: u64) -> RateLimitDescriptor {
    let mut e = entries.to_vec();
    e.push((RESERVE_KEY, ""));
    costing(descriptor(&e), estimate)
}

/// `entries` + the settle mark for `id`, actual use `actual`.
fn settling(entries: &[(&str, &str)], id: &str, actual: u64) -> RateLimitDescriptor {
    let mut e = entries.to_vec();
    e.push((SETTLE_KEY, id));
    costing(descriptor(&e), actual)
}

/// The reservation id an answer carries, if any.
fn reservation_of(r: &RateLimitResponse) -> Option<String> {
    let v = r.dynamic_metadata.as_ref()?.fields.get(RESERVATION_KEY)?;
    match &v.kind {
        Some(prost_types::value::Kind::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
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

/// What is left of `entries`' limits, by a check-only request (the smallest).
async fn left(l: &RateLimiter<AnyStore>, domain: &str, entries: &[(&str, &str)]) -> u32 {
    let r = ask(l, domain, vec![costing(descriptor(entries), 0)]).await;
    r.statuses[0].limit_remaining
}

/// A reservation of `estimate` on `entries`: its id when admitted.
async fn reserve(
    l: &RateLimiter<AnyStore>,
    domain: &str,
    entries: &[(&str, &str)],
    estimate: u64,
) -> Option<String> {
    let r = ask(l, domain, vec![reserving(entries, estimate)]).await;
    assert_eq!(r.overall_code == OK, reservation_of(&r).is_some(), "{r:?}");
    reservation_of(&r)
}

async fn settle(
    l: &RateLimiter<AnyStore>,
    domain: &str,
    entries: &[(&str, &str)],
    id: &str,
    actual: u64,
) {
    let r = ask(l, domain, vec![settling(entries, id, actual)]).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].current_limit.clone()),
        (OK, None)
    );
}

async fn basics(kind: StoreKind) {
    let clock = ManualClock::new(T0_US - T0_US % (60 * S) + S);
    let l = limiter_with(
        &[CONFIG, USAGE, STRICT],
        &load(),
        Settings::default(),
        store(kind, &clock).await,
    );
    let tenant = [("tenant", "a"), ("month", "m")];

    // Charged at once, on the minute and the month.
    let id = reserve(&l, "llm", &tenant, 300).await.expect("fits");
    assert_eq!(left(&l, "llm", &[("tenant", "a")]).await, 700);
    assert_eq!(
        left(&l, "llm", &tenant).await,
        700,
        "the minute is the tighter"
    );
    // Settled below the estimate: the unused 180 come back on both.
    settle(&l, "llm", &tenant, &id, 120).await;
    assert_eq!(left(&l, "llm", &[("tenant", "a")]).await, 880);
    // A second settle, and one of an id never issued, change nothing.
    settle(&l, "llm", &tenant, &id, 0).await;
    settle(&l, "llm", &tenant, "00000000000070000000000007", 0).await;
    assert_eq!(left(&l, "llm", &[("tenant", "a")]).await, 880);

    // Settled above: the excess lands as overdraft, past what was reserved.
    let id = reserve(&l, "llm", &tenant, 100).await.expect("fits");
    settle(&l, "llm", &tenant, &id, 250).await;
    assert_eq!(left(&l, "llm", &[("tenant", "a")]).await, 630);

    // An estimate that does not fit is refused and charges nothing, on any limit.
    assert!(reserve(&l, "llm", &tenant, 700).await.is_none());
    assert_eq!(left(&l, "llm", &[("tenant", "a")]).await, 630);
    // All-or-nothing with the request's other limits: 10 requests a minute.
    for _ in 0..10 {
        let r = ask(
            &l,
            "llm",
            vec![
                reserving(&[("tenant", "b")], 1),
                descriptor(&[("requests", "b")]),
            ],
        )
        .await;
        assert_eq!(r.overall_code, OK);
    }
    let r = ask(
        &l,
        "llm",
        vec![
            reserving(&[("tenant", "b")], 1),
            descriptor(&[("requests", "b")]),
        ],
    )
    .await;
    assert_eq!((r.overall_code, reservation_of(&r)), (OVER_LIMIT, None));
    assert_eq!(left(&l, "llm", &[("tenant", "b")]).await, 990);

    // In a usage domain a reservation must fit too (a usage charge would land past it).
    let id = reserve(&l, "usage-llm", &[("tenant", "u")], 900)
        .await
        .expect("fits");
    assert!(reserve(&l, "usage-llm", &[("tenant", "u")], 200)
        .await
        .is_none());
    assert_eq!(left(&l, "usage-llm", &[("tenant", "u")]).await, 100);
    settle(&l, "usage-llm", &[("tenant", "u")], &id, 1000).await;
    assert_eq!(left(&l, "usage-llm", &[("tenant", "u")]).await, 0);

    // The sliding window gives back in its granule, the bucket what later debts allow.
    let id = reserve(&l, "llm", &[("sliding", "s")], 400)
        .await
        .expect("fits");
    clock.advance(10 * S);
    settle(&l, "llm", &[("sliding", "s")], &id, 100).await;
    assert_eq!(left(&l, "llm", &[("sliding", "s")]).await, 900);
    let id = reserve(&l, "llm", &[("bucket", "t")], 400)
        .await
        .expect("fits");
    settle(&l, "llm", &[("bucket", "t")], &id, 100).await;
    assert_eq!(left(&l, "llm", &[("bucket", "t")]).await, 900);
    // A bucket never gives back more than charging the actual at reserve time would have
    // left: reserved 400, refilled whole in 30 s, then 100 charged (it found no debt), the
    // settle to 100 gives nothing back: 900 left, as if 100 had been charged up front.
    // (Taking the unused 300 off the bucket as it stands would leave it full: 1,000.)
    let id = reserve(&l, "llm", &[("bucket", "t2")], 400)
        .await
        .expect("fits");
    clock.advance(30 * S);
    let r = ask(
        &l,
        "llm",
        vec![costing(descriptor(&[("bucket", "t2")]), 100)],
    )
    .await;
    assert_eq!(r.overall_code, OK);
    settle(&l, "llm", &[("bucket", "t2")], &id, 100).await;
    assert_eq!(left(&l, "llm", &[("bucket", "t2")]).await, 900);
    // Reserved 400, 3 s later (50 refilled) 50 charged: the settle to 100 gives back all 300
    // unused, 900 left, again what charging 100 up front leaves.
    let id = reserve(&l, "llm", &[("bucket", "t3")], 400)
        .await
        .expect("fits");
    clock.advance(3 * S);
    let r = ask(
        &l,
        "llm",
        vec![costing(descriptor(&[("bucket", "t3")]), 50)],
    )
    .await;
    assert_eq!(r.overall_code, OK);
    settle(&l, "llm", &[("bucket", "t3")], &id, 100).await;
    assert_eq!(left(&l, "llm", &[("bucket", "t3")]).await, 900);

    // A settle after the minute ended: nothing of the old minute comes back, the excess
    // lands in the new one, and the month (still the same) gets its part back.
    let id = reserve(&l, "llm", &[("tenant", "c"), ("month", "m")], 500)
        .await
        .expect("fits");
    let month_before = left(&l, "llm", &[("tenant", "c"), ("month", "m")]).await;
    assert_eq!(month_before, 500, "the minute is the tighter");
    clock.advance(60 * S);
    settle(&l, "llm", &[("tenant", "c"), ("month", "m")], &id, 200).await;
    assert_eq!(left(&l, "llm", &[("tenant", "c")]).await, 1000);
    let id = reserve(&l, "llm", &[("tenant", "d")], 100)
        .await
        .expect("fits");
    clock.advance(60 * S);
    settle(&l, "llm", &[("tenant", "d")], &id, 160).await;
    assert_eq!(left(&l, "llm", &[("tenant", "d")]).await, 940);

    // Without an estimate (Envoy dropped the descriptor its header would have costed): the
    // fallback beside it is charged the domain's default, or refused where there is none.
    let fallback = |t: &str| descriptor(&[("tenant", t), (RESERVE_KEY, FALLBACK)]);
    let r = ask(&l, "llm", vec![fallback("e")]).await;
    assert!(reservation_of(&r).is_some(), "{r:?}");
    assert_eq!(left(&l, "llm", &[("tenant", "e")]).await, 950);
    let r = ask(
        &l,
        "llm",
        vec![reserving(&[("tenant", "f")], 10), fallback("f")],
    )
    .await;
    assert_eq!((r.overall_code, r.statuses.len()), (OK, 2));
    assert_eq!(
        left(&l, "llm", &[("tenant", "f")]).await,
        990,
        "the estimate, once"
    );
    let r = ask(&l, "strict", vec![fallback("g")]).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code),
        (OVER_LIMIT, OVER_LIMIT)
    );
    assert_eq!(
        left(&l, "strict", &[("tenant", "g")]).await,
        1000,
        "nothing charged"
    );
}

#[test]
fn a_reservation_is_charged_up_front_and_settles_to_the_actual_use() {
    for_every_store(basics);
}

/// `racers` callers, spread over `limiters`, each reserving 100 of a 1,000 budget (a minute
/// that does not end during the test), then settling with a random actual at most the
/// estimate. Never more reserved at once than the budget holds, and total spend never past it.
async fn race(limiters: Vec<Arc<RateLimiter<AnyStore>>>, racers: usize, tenant: String) {
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let spent = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..racers {
        let l = limiters[i % limiters.len()].clone();
        let (inside, most, spent, admitted) = (
            inside.clone(),
            most.clone(),
            spent.clone(),
            admitted.clone(),
        );
        let tenant = tenant.clone();
        tasks.push(tokio::spawn(async move {
            let entries = [("tenant", tenant.as_str())];
            let Some(id) = reserve(&l, "llm", &entries, 100).await else {
                return;
            };
            let now = inside.fetch_add(100, Ordering::SeqCst) + 100;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            let actual = (i as u64 * 37) % 101;
            spent.fetch_add(actual, Ordering::SeqCst);
            admitted.fetch_add(1, Ordering::SeqCst);
            inside.fetch_sub(100, Ordering::SeqCst);
            settle(&l, "llm", &entries, &id, actual).await;
        }));
    }
    for t in tasks {
        t.await.expect("a racer");
    }
    let spent = spent.load(Ordering::SeqCst);
    assert!(spent <= 1000, "spent {spent} of a 1,000 budget");
    assert!(
        admitted.load(Ordering::SeqCst) >= 10,
        "at least the budget's worth of estimates was admitted"
    );
    let used = 1000 - left(&limiters[0], "llm", &[("tenant", &tenant)]).await as u64;
    assert_eq!(used, spent, "the counter holds exactly what was spent");
}

#[test]
fn four_hundred_racing_reservations_on_memory_never_overspend() {
    for_stores(&[StoreKind::Memory], |kind| async move {
        let clock = ManualClock::new(T0_US - T0_US % (60 * S) + S);
        let l = Arc::new(limiter_with(
            &[CONFIG],
            &load(),
            Settings::default(),
            store(kind, &clock).await,
        ));
        race(vec![l], 400, "race".into()).await;
    });
}

#[test]
fn two_instances_racing_reservations_never_overspend() {
    for_stores(&[StoreKind::Redis, StoreKind::Cluster], |kind| async move {
        let clock = ManualClock::new(T0_US - T0_US % (60 * S) + S);
        let limiters = two_instances(kind, &clock)
            .await
            .map(|store| Arc::new(limiter_with(&[CONFIG], &load(), Settings::default(), store)))
            .to_vec();
        race(limiters, 400, "race".into()).await;
    });
}

/// The `tollgate.reservations.v1.Reservations` gRPC service, over a real socket, on every
/// store: a reserve answers the decision and an id, a settle names it.
#[test]
fn direct_callers_reserve_and_settle_over_grpc() {
    use tollgate::pb::tollgate::reservations::v1::reservations_client::ReservationsClient;
    use tollgate::pb::tollgate::reservations::v1::SettleRequest;

    use crate::support::server::start_with_store;
    for_every_store(|kind| async move {
        let clock = ManualClock::new(T0_US - T0_US % (60 * S) + S);
        let server = start_with_store(
            STRICT,
            Settings::default().into(),
            store(kind, &clock).await,
        )
        .await;
        let mut client = ReservationsClient::connect(server.grpc_url())
            .await
            .expect("connect");
        let reserve = |estimate: u64| {
            request(
                "strict",
                vec![costing(descriptor(&[("tenant", "grpc")]), estimate)],
            )
        };
        let r = client
            .reserve(reserve(800))
            .await
            .expect("reserve")
            .into_inner();
        assert_eq!(r.decision.as_ref().map(|d| d.overall_code), Some(OK));
        assert_eq!(r.reservation_id.len(), 26, "{r:?}");
        let over = client
            .reserve(reserve(300))
            .await
            .expect("reserve")
            .into_inner();
        assert_eq!(over.decision.map(|d| d.overall_code), Some(OVER_LIMIT));
        assert!(over.reservation_id.is_empty());
        let settle = |actual: u64| SettleRequest {
            domain: "strict".into(),
            descriptors: vec![costing(descriptor(&[("tenant", "grpc")]), actual)],
            reservation_id: r.reservation_id.clone(),
        };
        let done = client
            .settle(settle(500))
            .await
            .expect("settle")
            .into_inner();
        assert_eq!(done.limits, 1);
        assert_eq!(
            client
                .settle(settle(0))
                .await
                .expect("settle")
                .into_inner()
                .limits,
            0
        );
        let again = client
            .reserve(reserve(500))
            .await
            .expect("reserve")
            .into_inner();
        assert_eq!(
            again.decision.map(|d| d.overall_code),
            Some(OK),
            "the 300 not used came back"
        );
        let bad = SettleRequest {
            reservation_id: "not-an-id".into(),
            ..settle(1)
        };
        let e = client.settle(bad).await.expect_err("a bad id");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    });
}

/// Envoy Gateway's shape: the route's generic key, a distinct tenant, and a distinct
/// per-request value (`x-request-id`) the pairing names; 1,000 an hour per tenant.
const PAIRED: &str = "\
domain: eg
descriptors:
  - key: route
    value: route
    descriptors:
      - key: rule-0-match-0
        descriptors:
          - key: rule-0-match-1
            rate_limit: {unit: hour, requests_per_unit: 1000}
";

/// One call of Envoy Gateway's rule for `tenant` and request `id`, costing `cost`: the code.
async fn eg_call(l: &RateLimiter<AnyStore>, tenant: &str, id: &str, cost: u64) -> i32 {
    let d = descriptor(&[
        ("route", "route"),
        ("rule-0-match-0", tenant),
        ("rule-0-match-1", id),
    ]);
    let r = ask(l, "eg", vec![costing(d, cost)]).await;
    assert_eq!(r.statuses[0].code, r.overall_code, "{r:?}");
    r.overall_code
}

/// What is left of `tenant`'s hour: a call of cost 0 under a request id never used (a
/// reservation of nothing charges nothing).
async fn eg_left(l: &RateLimiter<AnyStore>, tenant: &str) -> u32 {
    let d = descriptor(&[
        ("route", "route"),
        ("rule-0-match-0", tenant),
        ("rule-0-match-1", &unique_prefix()),
    ]);
    ask(l, "eg", vec![costing(d, 0)]).await.statuses[0].limit_remaining
}

/// `--reservation-pair-keys rule-0-match-1`: the first call of a request id reserves its cost
/// on the tenant's counter (every request id shares it), the second settles it with its cost.
async fn pairs(kind: StoreKind) {
    let clock = ManualClock::new(T0_US - T0_US % (3600 * S) + S);
    let settings = Settings {
        reservation_pair_keys: vec!["rule-0-match-1".into()],
        ..Settings::default()
    };
    let l = limiter_with(&[PAIRED], &load(), settings, store(kind, &clock).await);
    let t = unique_prefix();
    // The request arrives: 400 reserved on the tenant's hour, shared by every request id.
    assert_eq!(eg_call(&l, &t, "r1", 400).await, OK);
    assert_eq!(eg_left(&l, &t).await, 600);
    // Its stream is done, 100 used: the reservation becomes 100.
    assert_eq!(eg_call(&l, &t, "r1", 100).await, OK);
    assert_eq!(eg_left(&l, &t).await, 900);
    // Two more of 400 fit, a third does not and charges nothing.
    assert_eq!(eg_call(&l, &t, "r2", 400).await, OK);
    assert_eq!(eg_call(&l, &t, "r3", 400).await, OK);
    assert_eq!(eg_call(&l, &t, "r4", 400).await, OVER_LIMIT);
    assert_eq!(eg_left(&l, &t).await, 100);
    // r2 used more than it reserved: the excess lands (overdraft), never lost.
    clock.advance(10 * S);
    assert_eq!(eg_call(&l, &t, "r2", 450).await, OK);
    assert_eq!(eg_left(&l, &t).await, 50);
    // r3 used 0: all of it comes back.
    assert_eq!(eg_call(&l, &t, "r3", 0).await, OK);
    assert_eq!(eg_left(&l, &t).await, 450);
    // Another tenant's requests count on their own counter.
    let u = unique_prefix();
    assert_eq!(eg_call(&l, &u, "r5", 1000).await, OK);
    assert_eq!(eg_call(&l, &u, "r6", 1).await, OVER_LIMIT);
    assert_eq!(eg_left(&l, &t).await, 450);
    // A request id settled already: its next call is a new reservation, not a second settle.
    assert_eq!(eg_call(&l, &t, "r1", 450).await, OK);
    assert_eq!(eg_left(&l, &t).await, 0);
    // Without the pairing, the same config counts each request id on its own counter.
    let plain = limiter_with(
        &[PAIRED],
        &load(),
        Settings::default(),
        store(kind, &clock).await,
    );
    let v = unique_prefix();
    assert_eq!(eg_call(&plain, &v, "r1", 1000).await, OK);
    assert_eq!(eg_call(&plain, &v, "r2", 1000).await, OK);
}

#[test]
fn calls_paired_by_a_request_id_reserve_then_settle() {
    for_every_store(pairs);
}

/// The record lives under the key docs/configuration.md ("The record") names:
/// `<prefix>v3:{tag}|rsv:<hi>.<lo>`, the id's two 13-digit halves in hex without leading zeros.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_is_under_the_documented_key() {
    let redis = crate::support::kit::blocking(crate::support::kit::redis_single);
    let clock = ManualClock::new(T0_US - T0_US % (60 * S) + S);
    let setup = crate::support::kit::RedisSetup::new(redis.url(), &clock);
    let prefix = setup.key_prefix.clone();
    let store = Arc::new(AnyStore::from(setup.connect()));
    crate::support::kit::wait_ready(store.as_ref()).await;
    let l = limiter_with(&[CONFIG], &load(), Settings::default(), store);
    let id = reserve(&l, "llm", &[("requests", "r")], 1)
        .await
        .expect("fits");
    assert_eq!(id.len(), 26, "{id}");
    let half = |h: &str| format!("{:x}", u64::from_str_radix(h, 16).expect("hex"));
    let key = format!(
        "{prefix}v3:{{llm|requests=r}}|rsv:{}.{}",
        half(&id[..13]),
        half(&id[13..])
    );
    assert_eq!(redis.cli(&["EXISTS", &key]), "1", "no record at {key}");
}
