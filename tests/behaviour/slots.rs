//! Concurrency caps (`algorithm: concurrency`) on every store: slots taken by an OK request
//! under its id and held until released, renewed or expired; a release of an id never taken,
//! already released or expired frees nothing; a request denied as a whole takes no slot (on a
//! cluster, the slot a group took is taken back); a release is never a usage charge. Then two
//! tollgate instances on one Redis (and one Redis Cluster), hundreds of racing acquirers over
//! real gRPC: never more slots held than the cap, and slots of callers killed before they
//! released come back when their lease ends.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::algorithm::rule::Mode;
use tollgate::base::clock::ManualClock;
use tollgate::config::load::LoadOptions;
use tollgate::config::usage::UsageDomains;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::pb::tollgate::slots::v1::slots_client::SlotsClient;
use tollgate::pb::tollgate::slots::v1::SlotRequest;
use tollgate::service::answer::SlotsDone;
use tollgate::service::settings::Settings;
use tollgate::service::slots::{format_id, parse_id, RELEASE_KEY, SLOT_KEY};
use tollgate::service::RateLimiter;
use tollgate::store::any::AnyStore;

use crate::support::kit::{
    for_every_store, for_stores, limiter, limiter_with, redis_url, store, unique_prefix, StoreKind,
};
use crate::support::server::{descriptor, request, OK, OVER_LIMIT, T0_US};

const S: u64 = 1_000_000;

const CONFIG: &str = "\
domain: gen
descriptors:
  - key: model
    rate_limit: {algorithm: concurrency, requests_per_unit: 2, lease_ttl: 10s}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100}
";

/// The slot id an answer carries, if any.
fn slot_of(r: &RateLimitResponse) -> Option<String> {
    let v = r.dynamic_metadata.as_ref()?.fields.get(SLOT_KEY)?;
    match &v.kind {
        Some(prost_types::value::Kind::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

async fn decide(
    l: &RateLimiter<AnyStore>,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    l.should_rate_limit(&request("gen", descriptors))
        .await
        .expect("a decision")
}

/// An acquire of one slot of `model`: its id when admitted.
async fn take(l: &RateLimiter<AnyStore>, model: &str) -> Option<String> {
    let r = decide(l, vec![descriptor(&[("model", model)])]).await;
    assert_eq!(r.overall_code == OK, slot_of(&r).is_some(), "{r:?}");
    slot_of(&r)
}

async fn slots(l: &RateLimiter<AnyStore>, model: &str, id: &str, mode: Mode) -> SlotsDone {
    let req = request("gen", vec![descriptor(&[("model", model)])]);
    l.slots(&req, parse_id(id).expect("an id"), mode, None)
        .await
        .expect("a release or renew")
}

async fn basics(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let l = limiter(CONFIG, Settings::default(), store(kind, &clock).await);

    let a = take(&l, "m").await.expect("first slot");
    let b = take(&l, "m").await.expect("second slot");
    assert_ne!(a, b);
    // Full: the wait is until the first lease ends.
    let r = decide(&l, vec![descriptor(&[("model", "m")])]).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(
        r.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(10)
    );
    assert_eq!(slot_of(&r), None);

    // A release frees exactly the id's slot, once.
    let done = slots(&l, "m", &a, Mode::Release).await;
    assert_eq!((done.limits, done.hold_us), (1, Some(10 * S)));
    assert_eq!(slots(&l, "m", &a, Mode::Release).await.limits, 0);
    let never = format_id((7, 7));
    assert_eq!(slots(&l, "m", &never, Mode::Release).await.limits, 0);
    let c = take(&l, "m").await.expect("a freed slot");
    assert!(take(&l, "m").await.is_none());

    // A renew moves the lease; an id that holds nothing is not renewed.
    clock.advance(6 * S);
    assert_eq!(slots(&l, "m", &b, Mode::Renew).await.limits, 1);
    assert_eq!(slots(&l, "m", &a, Mode::Renew).await.limits, 0);
    clock.advance(5 * S);
    // c (taken at T0) expired at T0+10 s; b, renewed at T0+6 s, holds until T0+16 s.
    let d = take(&l, "m").await.expect("c's lease ended");
    assert!(take(&l, "m").await.is_none(), "b still holds");
    assert_eq!(
        slots(&l, "m", &c, Mode::Release).await.limits,
        0,
        "c expired"
    );
    clock.advance(5 * S);
    assert!(take(&l, "m").await.is_some(), "b's lease ended");
    assert_eq!(slots(&l, "m", &d, Mode::Release).await.limits, 1);

    // The release descriptor, as Envoy sends it when the stream is done: answered OK, frees
    // the slot, charges nothing else.
    let e = take(&l, "m2").await.expect("a slot");
    take(&l, "m2").await.expect("a slot");
    assert!(take(&l, "m2").await.is_none());
    let r = decide(
        &l,
        vec![
            descriptor(&[("model", "m2"), (RELEASE_KEY, &e)]),
            descriptor(&[("tokens", "t")]),
        ],
    )
    .await;
    assert_eq!((r.overall_code, r.statuses.len()), (OK, 2));
    assert_eq!(r.statuses[0].current_limit, None);
    assert_eq!(r.statuses[1].limit_remaining, 99);
    assert!(take(&l, "m2").await.is_some(), "e was released");

    // All or nothing: a request its tenant limit denies takes no slot (on a cluster the
    // model's group lands first and is taken back).
    assert_eq!(
        decide(&l, vec![descriptor(&[("tenant", "x")])])
            .await
            .overall_code,
        OK
    );
    let r = decide(
        &l,
        vec![
            descriptor(&[("model", "m3")]),
            descriptor(&[("tenant", "x")]),
        ],
    )
    .await;
    assert_eq!((r.overall_code, slot_of(&r)), (OVER_LIMIT, None));
    assert!(take(&l, "m3").await.is_some());
    assert!(
        take(&l, "m3").await.is_some(),
        "the denied request held nothing"
    );
}

#[test]
fn slots_are_taken_released_renewed_and_expire_on_every_store() {
    for_every_store(basics);
}

/// In a usage domain every limit is an overdraft limit, but a concurrency cap stays a cap, and
/// a release charges no usage.
async fn in_usage_domain(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let load = LoadOptions {
        usage_domains: UsageDomains::parse("gen").expect("glob"),
        ..LoadOptions::default()
    };
    let l = limiter_with(
        &[CONFIG],
        &load,
        Settings::default(),
        store(kind, &clock).await,
    );
    let a = take(&l, "u").await.expect("slot");
    take(&l, "u").await.expect("slot");
    assert!(take(&l, "u").await.is_none(), "a cap, not an overdraft");
    let mut release = descriptor(&[("model", "u"), (RELEASE_KEY, &a)]);
    release.hits_addend = Some(1000);
    let r = decide(&l, vec![release, descriptor(&[("tokens", "u")])]).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(
        r.statuses[1].limit_remaining, 99,
        "the release charged no usage"
    );
    assert!(take(&l, "u").await.is_some());
}

#[test]
fn a_release_is_never_a_usage_charge() {
    for_every_store(in_usage_domain);
}

const RACE: &str = "\
domain: gen
descriptors:
  - key: model
    rate_limit: {algorithm: concurrency, requests_per_unit: 5, lease_ttl: 1s}
";

fn slot_request(id: &str) -> SlotRequest {
    SlotRequest {
        domain: "gen".into(),
        descriptors: vec![descriptor(&[("model", "race")])],
        slot_id: id.to_string(),
    }
}

fn acquire_request() -> RateLimitRequest {
    request("gen", vec![descriptor(&[("model", "race")])])
}

/// Two instances on one Redis (or Cluster), sharing a key prefix, over real gRPC.
async fn two_instances(kind: StoreKind) {
    use crate::support::kit::RedisSetup;
    use crate::support::server::start_with_store;
    let url = redis_url(kind).expect("a Redis");
    let prefix = unique_prefix();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let mut setup = RedisSetup::new(url.clone(), &ManualClock::new(0));
        setup.key_prefix = prefix.clone();
        setup.clock = tollgate::store::redis::options::ClockSource::Redis;
        setup.wall = Arc::new(tollgate::base::clock::SystemClock);
        let store = Arc::new(setup.connect());
        servers.push(start_with_store(RACE, Settings::default().into(), store).await);
    }
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(SlotsClient::connect(s.grpc_url()).await.expect("connect"));
    }

    // Killed callers: they fill the cap and never release. Nobody gets in until their leases
    // end (1 s), then everybody does.
    for i in 0..5 {
        let r = clients[i % 2]
            .clone()
            .acquire(acquire_request())
            .await
            .expect("acquire");
        assert!(!r.into_inner().slot_id.is_empty());
    }
    let refused = clients[0]
        .clone()
        .acquire(acquire_request())
        .await
        .expect("acquire");
    assert!(
        refused.into_inner().slot_id.is_empty(),
        "the cap is held by the killed callers"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // Hundreds of racing acquirers on both instances: at most 5 inside at once.
    let inside = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let mut client = clients[i % 2].clone();
        let (inside, most, admitted) = (inside.clone(), most.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..2_000 {
                let r = client.acquire(acquire_request()).await.expect("acquire");
                let id = r.into_inner().slot_id;
                if id.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                let done = client.release(slot_request(&id)).await.expect("release");
                assert_eq!(
                    done.into_inner().limits,
                    1,
                    "the slot was held until released"
                );
                admitted.fetch_add(1, Ordering::SeqCst);
                return;
            }
            panic!("acquirer {i} never got a slot");
        }));
    }
    for t in tasks {
        t.await.expect("an acquirer");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 300);
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 5, "{most} inside at once, the cap is 5");
    assert!(
        most >= 2,
        "the acquirers never overlapped ({most}): the race did not happen"
    );
    // Everything was released: the cap is whole again.
    for i in 0..5 {
        let r = clients[i % 2]
            .clone()
            .acquire(acquire_request())
            .await
            .expect("acquire");
        assert!(!r.into_inner().slot_id.is_empty());
    }
}

#[test]
fn two_instances_never_hold_more_slots_than_the_cap() {
    for_stores(&[StoreKind::Redis, StoreKind::Cluster], two_instances);
}
