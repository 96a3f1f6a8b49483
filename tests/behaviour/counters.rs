//! The operator's counters on every store: `counters::inspect` reports what a check-only
//! (`hits_addend: 0`) decision would, for every limit a descriptor reaches (hierarchical and
//! shared ones, every algorithm, overdraft debt), and writes nothing; `counters::reset` clears
//! the descriptor's own limits (a shared one only by name), and nothing charged before a reset
//! is refunded into the state after it: not a take-back of a request racing it (two
//! instances, hundreds of decisions, resets between them), not a lease handed back. Readings
//! under `--clock redis` are at Redis `TIME`; the limiter counts who is being limited.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::admin::counters::{inspect, reset, CounterError, CounterView, Selector};
use tollgate::base::clock::ManualClock;
use tollgate::config::load::{compile_sources, LoadOptions};
use tollgate::config::Config;
use tollgate::service::settings::Settings;
use tollgate::service::validate::Bounds;
use tollgate::store::any::AnyStore;
use tollgate::store::Store;

use crate::support::kit::{
    for_every_store, for_stores, limiter, redis_url, store, unique_prefix, wait_ready, RedisSetup,
    StoreKind,
};
use crate::support::server::{descriptor, request, OK, OVER_LIMIT, T0_US};

use tollgate::pb::common::RateLimitDescriptor;

/// `d` with its own hits_addend.
fn hits(mut d: RateLimitDescriptor, n: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(n);
    d
}

const CONFIG: &str = "\
domain: ops
descriptors:
  - key: tenant
    hierarchical: true
    rate_limits:
      - {name: per_tenant, unit: minute, requests_per_unit: 10}
      - {name: global, unit: minute, requests_per_unit: 1000, shared: true}
    descriptors:
      - key: model
        rate_limit: {name: per_model, unit: minute, requests_per_unit: 5, algorithm: sliding_window}
  - key: bucket
    rate_limit: {name: bucket, unit: second, requests_per_unit: 4, algorithm: token_bucket}
  - key: budget
    rate_limit: {name: budget, unit: hour, requests_per_unit: 10, overdraft: true}
  - key: gen
    rate_limit: {name: in_flight, algorithm: concurrency, requests_per_unit: 3, lease_ttl: 60s}
";

fn config(yaml: &str) -> Config {
    compile_sources(&[("ops.yaml".into(), yaml.into())], &LoadOptions::default())
        .expect("config compiles")
}

fn sel(entries: &[(&str, &str)]) -> Selector {
    Selector {
        domain: "ops".into(),
        entries: entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        limit: None,
    }
}

async fn look(c: &Config, s: &AnyStore, entries: &[(&str, &str)]) -> Vec<CounterView> {
    inspect(c, s, &Bounds::default(), &sel(entries))
        .await
        .expect("counters")
}

fn named<'v>(views: &'v [CounterView], name: &str) -> &'v CounterView {
    views
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no {name} in {views:?}"))
}

async fn reports_what_a_check_only_decision_would(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let st = store(kind, &clock).await;
    let c = config(CONFIG);
    let l = limiter(CONFIG, Settings::default(), st.clone());
    let decide = |entries: &'static [(&'static str, &'static str)], n: u64| {
        let l = &l;
        async move {
            l.should_rate_limit(&request("ops", vec![hits(descriptor(entries), n)]))
                .await
                .expect("a decision")
        }
    };
    // Untouched: whole, and looking writes nothing (looked at twice, then charged as new).
    let fresh = look(&c, &st, &[("tenant", "a"), ("model", "m")]).await;
    assert_eq!(fresh.len(), 3, "{fresh:?}");
    for v in &fresh {
        assert_eq!((v.used, v.remaining), (0, v.limit), "{v:?}");
    }
    assert!(named(&fresh, "global").shared);
    assert_eq!(named(&fresh, "per_model").algorithm, "sliding_window");
    assert_eq!(
        look(&c, &st, &[("tenant", "a"), ("model", "m")]).await,
        fresh
    );

    assert_eq!(
        decide(&[("tenant", "a"), ("model", "m")], 3)
            .await
            .overall_code,
        OK
    );
    clock.advance(1_500_000);
    let views = look(&c, &st, &[("tenant", "a"), ("model", "m")]).await;
    assert_eq!(
        (
            named(&views, "per_tenant").used,
            named(&views, "per_tenant").remaining
        ),
        (3, 7)
    );
    assert_eq!(
        (
            named(&views, "per_model").used,
            named(&views, "per_model").remaining
        ),
        (3, 2)
    );
    assert_eq!(named(&views, "global").used, 3);
    // What a hits_addend: 0 decision reports for the descriptor (its tightest limit).
    let check = decide(&[("tenant", "a"), ("model", "m")], 0).await;
    let status = &check.statuses[0];
    let tightest = named(&views, "per_model");
    assert_eq!(u64::from(status.limit_remaining), tightest.remaining);
    assert_eq!(
        status
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds as u64),
        Some(tightest.reset_after_s)
    );
    assert!(
        tightest.key.contains("tenant") || tightest.key.contains('a'),
        "{tightest:?}"
    );

    // A token bucket: used is capacity minus tokens, refilling.
    assert_eq!(decide(&[("bucket", "b")], 4).await.overall_code, OK);
    let b = &look(&c, &st, &[("bucket", "b")]).await[0];
    assert_eq!((b.used, b.remaining, b.reset_after_s), (4, 0, 1), "{b:?}");
    clock.advance(500_000);
    let b = &look(&c, &st, &[("bucket", "b")]).await[0];
    assert_eq!((b.used, b.remaining), (2, 2), "{b:?}");

    // An overdraft budget in debt.
    assert_eq!(decide(&[("budget", "x")], 8).await.overall_code, OK);
    assert_eq!(decide(&[("budget", "x")], 6).await.overall_code, OK);
    let d = &look(&c, &st, &[("budget", "x")]).await[0];
    assert_eq!((d.used, d.remaining, d.overdraft_debt), (14, 0, 4), "{d:?}");
    assert_eq!(decide(&[("budget", "x")], 0).await.overall_code, OVER_LIMIT);

    // Concurrency: slots held.
    assert_eq!(decide(&[("gen", "g")], 2).await.overall_code, OK);
    let g = &look(&c, &st, &[("gen", "g")]).await[0];
    assert_eq!(
        (g.used, g.remaining, g.window.as_str()),
        (2, 1, "lease 60s"),
        "{g:?}"
    );

    // An unknown domain, and a descriptor no rule matches.
    let mut other = sel(&[("tenant", "a")]);
    other.domain = "nope".into();
    let e = inspect(&c, &*st, &Bounds::default(), &other)
        .await
        .unwrap_err();
    assert!(matches!(e, CounterError::NotFound(_)), "{e}");
    assert!(look(&c, &st, &[("unmatched", "z")]).await.is_empty());
}

#[test]
fn counters_report_what_a_check_only_decision_would() {
    for_every_store(reports_what_a_check_only_decision_would);
}

async fn resets_own_limits_and_shared_ones_by_name(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let st = store(kind, &clock).await;
    let c = config(CONFIG);
    let l = limiter(CONFIG, Settings::default(), st.clone());
    let req = request("ops", vec![descriptor(&[("tenant", "a"), ("model", "m")])]);
    for _ in 0..5 {
        assert_eq!(l.should_rate_limit(&req).await.unwrap().overall_code, OK);
    }
    assert_eq!(
        l.should_rate_limit(&req).await.unwrap().overall_code,
        OVER_LIMIT
    );
    let entries = [("tenant", "a"), ("model", "m")];
    let done = reset(&c, &*st, &Bounds::default(), &sel(&entries))
        .await
        .unwrap();
    let mut names: Vec<(&str, bool, u64)> = done
        .iter()
        .map(|r| (r.name.as_str(), r.cleared, r.used_before))
        .collect();
    names.sort();
    assert_eq!(names, vec![("per_model", true, 5), ("per_tenant", true, 5)]);
    let views = look(&c, &st, &entries).await;
    assert_eq!(named(&views, "per_model").used, 0);
    assert_eq!(
        named(&views, "global").used,
        5,
        "a shared limit is reset only by name"
    );
    assert_eq!(l.should_rate_limit(&req).await.unwrap().overall_code, OK);
    assert_eq!(named(&look(&c, &st, &entries).await, "per_model").used, 1);

    let mut by_name = sel(&entries);
    by_name.limit = Some("global".into());
    let done = reset(&c, &*st, &Bounds::default(), &by_name).await.unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].name.as_str(), done[0].used_before), ("global", 6));
    let views = look(&c, &st, &entries).await;
    assert_eq!(
        (
            named(&views, "global").used,
            named(&views, "per_model").used
        ),
        (0, 1)
    );

    // Resetting again clears nothing; every algorithm resets.
    let again = reset(&c, &*st, &Bounds::default(), &by_name).await.unwrap();
    assert!(!again[0].cleared);
    for (entries, n) in [
        ([("bucket", "b")], 4),
        ([("budget", "x")], 12),
        ([("gen", "g")], 3),
    ] {
        let r = request("ops", vec![hits(descriptor(&entries), n)]);
        assert_eq!(l.should_rate_limit(&r).await.unwrap().overall_code, OK);
        let done = reset(&c, &*st, &Bounds::default(), &sel(&entries))
            .await
            .unwrap();
        assert!(done[0].cleared, "{entries:?}");
        let v = &look(&c, &st, &entries).await[0];
        assert_eq!(
            (v.used, v.remaining, v.overdraft_debt),
            (0, v.limit, 0),
            "{v:?}"
        );
        assert_eq!(
            l.should_rate_limit(&r).await.unwrap().overall_code,
            OK,
            "{entries:?}"
        );
    }
    // A name that is not there says which are.
    let mut wrong = sel(&entries);
    wrong.limit = Some("nope".into());
    let e = reset(&c, &*st, &Bounds::default(), &wrong)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("per_tenant") && e.contains("global"), "{e}");
}

#[test]
fn resets_clear_own_limits_and_shared_ones_by_name() {
    for_every_store(resets_own_limits_and_shared_ones_by_name);
}

/// Two instances on one Redis (or Cluster) decide hundreds of requests, each charging a tenant
/// limit and a tight shared one in another placement group (on a cluster the tenant charge of
/// a request the shared limit denies is taken back), while one instance resets the tenant's
/// counter again and again. Requests that start after the last reset has finished land in
/// the state after it, and nothing refunds into that state: the counter then holds at least
/// every one of them that was admitted, and never more than the limit.
async fn resets_race_decisions(kind: StoreKind) {
    const RACE: &str = "\
domain: ops
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: hour, requests_per_unit: 40}
  - key: coin
    rate_limits:
      - {name: coin, unit: hour, requests_per_unit: 30}
";
    let url = redis_url(kind).expect("a redis kind");
    let prefix = unique_prefix();
    let clock = ManualClock::new(T0_US);
    let mut stores = Vec::new();
    for _ in 0..2 {
        let mut setup = RedisSetup::new(url.clone(), &clock);
        setup.key_prefix = prefix.clone();
        setup.local_cache_size = 0;
        let s: Arc<AnyStore> = Arc::new(setup.connect().into());
        wait_ready(&*s).await;
        stores.push(s);
    }
    let c = Arc::new(config(RACE));
    let limiters: Vec<_> = stores
        .iter()
        .map(|s| Arc::new(limiter(RACE, Settings::default(), s.clone())))
        .collect();
    let epoch = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..16u64 {
        let l = limiters[(w % 2) as usize].clone();
        let (epoch, stop) = (epoch.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            // Per decision: the resets finished when it started, and whether it was admitted.
            let mut seen = Vec::new();
            let mut i = w;
            while !stop.load(Ordering::SeqCst) {
                // Every third request also asks a coin limit that runs out: denied there, its
                // tenant charge (landed in another group on a cluster) is taken back.
                let mut ds = vec![descriptor(&[("tenant", "t")])];
                if i % 3 == 0 {
                    ds.push(descriptor(&[("coin", "c")]));
                }
                i += 1;
                let started = epoch.load(Ordering::SeqCst);
                let r = l
                    .should_rate_limit(&request("ops", ds))
                    .await
                    .expect("decided");
                seen.push((started, r.overall_code == OK));
            }
            seen
        }));
    }
    const RESETS: u64 = 12;
    for e in 1..=RESETS {
        tokio::time::sleep(Duration::from_millis(4)).await;
        reset(
            &c,
            &*stores[0],
            &Bounds::default(),
            &sel(&[("tenant", "t")]),
        )
        .await
        .expect("reset");
        epoch.store(e, Ordering::SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    stop.store(true, Ordering::SeqCst);
    let (mut decided, mut admitted_after_last) = (0, 0u64);
    for w in workers {
        for (started, ok) in w.await.unwrap() {
            decided += 1;
            admitted_after_last += u64::from(started == RESETS && ok);
        }
    }
    let used = look(&c, &stores[0], &[("tenant", "t")]).await[0].used;
    assert!(
        admitted_after_last > 0 && used >= admitted_after_last && admitted_after_last <= 40,
        "{}: {decided} decided, {used} used, admitted after the last reset {admitted_after_last}",
        kind.name()
    );
    // Fill it: exactly the limit is admitted in all.
    let mut more = 0;
    for i in 0..60 {
        let r = limiters[i % 2]
            .should_rate_limit(&request("ops", vec![descriptor(&[("tenant", "t")])]))
            .await
            .unwrap();
        more += u64::from(r.overall_code == OK);
    }
    assert_eq!(used + more, 40, "{}", kind.name());
}

#[test]
fn resets_racing_decisions_on_two_instances_refund_nothing_into_the_new_state() {
    for_stores(
        &[StoreKind::Redis, StoreKind::Cluster],
        resets_race_decisions,
    );
}

/// A lease another instance holds, handed back after a reset, does not come off the counts
/// made after it.
async fn lease_given_back_after_a_reset(kind: StoreKind) {
    const LEASED: &str = "\
domain: ops
descriptors:
  - key: tenant
    rate_limits:
      - {name: global, unit: hour, requests_per_unit: 100, shared: true, lease: 10}
";
    let url = redis_url(kind).expect("a redis kind");
    let prefix = unique_prefix();
    let clock = ManualClock::new(T0_US);
    let connect = || {
        let mut setup = RedisSetup::new(url.clone(), &clock);
        setup.key_prefix = prefix.clone();
        setup.local_cache_size = 0;
        setup.connect()
    };
    let holder = Arc::new(connect());
    wait_ready(&*holder).await;
    let other: Arc<AnyStore> = Arc::new(connect().into());
    wait_ready(&*other).await;
    let c = config(LEASED);
    let l = limiter(LEASED, Settings::default(), holder.clone());
    let req = request("ops", vec![descriptor(&[("tenant", "a")])]);
    assert_eq!(l.should_rate_limit(&req).await.unwrap().overall_code, OK);
    let mut by_name = sel(&[("tenant", "a")]);
    by_name.limit = Some("global".into());
    let before = look(&c, &other, &[("tenant", "a")]).await;
    assert!(before[0].used > 1, "the holder took a lease: {before:?}");
    reset(&c, &*other, &Bounds::default(), &by_name)
        .await
        .unwrap();
    let o = limiter(LEASED, Settings::default(), other.clone());
    for _ in 0..3 {
        assert_eq!(o.should_rate_limit(&req).await.unwrap().overall_code, OK);
    }
    let counted = look(&c, &other, &[("tenant", "a")]).await[0].used;
    // The holder stops and hands back its unspent units (marked with the old window).
    holder.close().await;
    assert_eq!(look(&c, &other, &[("tenant", "a")]).await[0].used, counted);
}

#[test]
fn a_lease_given_back_after_a_reset_refunds_nothing() {
    for_stores(
        &[StoreKind::Redis, StoreKind::Cluster],
        lease_given_back_after_a_reset,
    );
}

/// Who is being limited, on every store: the limiter counts each descriptor's OVER_LIMIT
/// answers, and nothing for OK ones.
async fn top_counts_over_limit_answers(kind: StoreKind) {
    let clock = ManualClock::new(T0_US);
    let st = store(kind, &clock).await;
    let l = limiter(CONFIG, Settings::default(), st.clone());
    for (tenant, n) in [("a", 14u64), ("b", 12), ("c", 3)] {
        for _ in 0..n {
            let r = request(
                "ops",
                vec![descriptor(&[("tenant", tenant), ("model", "m")])],
            );
            l.should_rate_limit(&r).await.expect("a decision");
        }
    }
    let top = l
        .top()
        .report("ops", 20)
        .expect("over-limit answers were counted");
    let got: Vec<(&str, u64)> = top
        .minute
        .iter()
        .map(|h| (h.descriptor.as_str(), h.over_limit))
        .collect();
    // per_model allows 5 a minute per tenant and model.
    assert_eq!(
        got,
        vec![("tenant=a,model=m", 9), ("tenant=b,model=m", 7)],
        "{}",
        kind.name()
    );
    assert_eq!((top.total_minute, top.total_hour), (16, 16));
}

#[test]
fn top_counts_over_limit_answers_on_every_store() {
    for_every_store(top_counts_over_limit_answers);
}

/// Under `--clock redis` a reading is at Redis `TIME`: the window's end is a real one.
async fn readings_use_redis_time(kind: StoreKind) {
    let st = tollgate_store_on_redis_time(kind).await;
    let c = config(CONFIG);
    let l = limiter(CONFIG, Settings::default(), st.clone());
    let r = request("ops", vec![descriptor(&[("tenant", "t"), ("model", "m")])]);
    assert_eq!(l.should_rate_limit(&r).await.unwrap().overall_code, OK);
    let views = look(&c, &st, &[("tenant", "t"), ("model", "m")]).await;
    let t = named(&views, "per_tenant");
    let wall_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert_eq!(t.used, 1);
    assert!(
        t.reset_after_s <= 60 && t.resets_at_unix_ms > wall_ms,
        "{t:?}"
    );
    assert!(t.resets_at_unix_ms <= wall_ms + 61_000, "{t:?}");
}

/// A Redis store of `kind` whose scripts read Redis `TIME`.
async fn tollgate_store_on_redis_time(kind: StoreKind) -> Arc<AnyStore> {
    let unused = ManualClock::new(T0_US);
    let mut setup = RedisSetup::new(redis_url(kind).expect("a redis kind"), &unused);
    setup.clock = tollgate::store::redis::options::ClockSource::Redis;
    let s: Arc<AnyStore> = Arc::new(setup.connect().into());
    wait_ready(&*s).await;
    s
}

#[test]
fn readings_under_the_redis_clock_use_redis_time() {
    for_stores(
        &[StoreKind::Redis, StoreKind::Cluster],
        readings_use_redis_time,
    );
}
