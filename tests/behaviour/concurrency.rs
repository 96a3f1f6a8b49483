//! Concurrency against real Redis: several tollgate instances on one Redis Cluster (three
//! primaries with a replica each, started here on free loopback ports) enforce one limit
//! exactly; a tenant limit and a `shared` limit in another slot stay exact under concurrent load
//! (and the memory store agrees); a tenant at its limit does not starve another one for longer
//! than a burst; hostile descriptor keys and values neither break cluster routing (CROSSSLOT)
//! nor make two descriptors share a counter.
//!
//! Calls that reach a serving thread together share one `EVALSHA` and stay exact, and a call
//! Redis cannot run fails alone.
//!
//! Every request goes through a real gRPC client to a real server started in-process; time
//! comes from Redis `TIME`, so bursts are scheduled away from a minute boundary.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tollgate::base::clock::{ManualClock, SystemClock};
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::{RateLimitRequest, RateLimitResponse};
use tollgate::service::settings::Settings;
use tollgate::store::redis::options::{ClockSource, KEY_FORMAT};
use tollgate::store::redis::RedisStore;
use tonic::transport::Channel;

use crate::support::kit::{avoid_window_edge, blocking, redis_cluster, unique_prefix, RedisSetup};
use crate::support::redis::{RedisCluster, RedisServer};
use crate::support::server::{
    self as common, descriptor, request, try_call, with_override, TestServer, OK, OVER_LIMIT,
};

type Client = RateLimitServiceClient<Channel>;

/// The proto enum number of MINUTE, for request-side limit overrides.
const MINUTE: i32 = 2;

/// A Redis store on Redis `TIME` (this machine's clock), connected in the background (the
/// server waits for it).
fn redis_store(url: &str, key_prefix: &str) -> Arc<RedisStore> {
    let clock = ManualClock::new(0);
    let mut setup = RedisSetup::new(url.to_string(), &clock);
    setup.key_prefix = key_prefix.to_string();
    setup.timeout = Duration::from_millis(500);
    setup.clock = ClockSource::Redis;
    setup.wall = Arc::new(SystemClock);
    Arc::new(setup.connect())
}

/// A tollgate server on its own Redis store, waited for until SERVING.
async fn start_on_redis(url: &str, key_prefix: &str, yaml: &str) -> TestServer {
    common::start_with_store(
        yaml,
        Settings::default().into(),
        redis_store(url, key_prefix),
    )
    .await
}

/// `per_server` connections to each server, interleaved (a, b, a, b, ...).
async fn clients(servers: &[&TestServer], per_server: usize) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..per_server {
        for s in servers {
            out.push(s.client().await);
        }
    }
    out
}

/// Sends every request at once (released together by a barrier) and returns the answers in order.
async fn burst(calls: Vec<(Client, RateLimitRequest)>) -> Vec<Result<RateLimitResponse, String>> {
    let barrier = Arc::new(tokio::sync::Barrier::new(calls.len()));
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|(mut client, req)| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                try_call(&mut client, req)
                    .await
                    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("call task panicked"));
    }
    out
}

/// The overall codes of `results`, failing the test on any call that did not get an answer.
fn overall_codes(results: &[Result<RateLimitResponse, String>]) -> Vec<i32> {
    let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        errors.is_empty(),
        "{} of {} calls failed; first: {:?}",
        errors.len(),
        results.len(),
        errors.first()
    );
    results
        .iter()
        .map(|r| {
            let code = r.as_ref().map_or(0, |resp| resp.overall_code);
            assert!(code == OK || code == OVER_LIMIT, "overall code {code}");
            code
        })
        .collect()
}

async fn avoid_minute_boundary(need: Duration) {
    avoid_window_edge(Duration::from_secs(60), need).await;
}

/// Every counter key with `prefix` on the cluster's primaries (not the store's marker keys).
fn keys_with_prefix(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    let pattern = format!("{prefix}*");
    let marker = format!("{prefix}marker:");
    cluster
        .masters()
        .into_iter()
        .flat_map(|port| {
            cluster
                .cli(port, &["KEYS", &pattern])
                .lines()
                .filter(|line| !line.is_empty() && !line.starts_with(&marker))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The hash tag of a stored key: between the first `{` and the next `}`, as Redis hashes it.
fn redis_hash_tag(key: &str) -> Option<&str> {
    let (_, after) = key.split_once('{')?;
    let (tag, _) = after.split_once('}')?;
    (!tag.is_empty()).then_some(tag)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_cluster_admit_exactly_the_limit() {
    let cluster = blocking(redis_cluster);
    let yaml = r#"
domain: conc
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 50}
"#;
    let a = start_on_redis(&cluster.seed_url(), "exact:", yaml).await;
    let b = start_on_redis(&cluster.seed_url(), "exact:", yaml).await;
    let pool = clients(&[&a, &b], 4).await;

    avoid_minute_boundary(Duration::from_secs(15)).await;
    let calls = (0..200)
        .map(|i| {
            (
                pool[i % pool.len()].clone(),
                common::req("conc", &[&[("api", "checkout")]]),
            )
        })
        .collect();
    let codes = overall_codes(&burst(calls).await);
    let admitted_by = |server: usize| {
        codes
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c == OK && i % 2 == server)
            .count()
    };
    println!(
        "two instances, 200 concurrent calls, limit 50: {} OK via instance A, {} via B",
        admitted_by(0),
        admitted_by(1)
    );
    let ok = codes.iter().filter(|&&c| c == OK).count();
    assert_eq!(ok, 50, "OK answers across both instances");
    assert_eq!(codes.len() - ok, 150, "OVER_LIMIT answers");

    a.stop().await;
    b.stop().await;
}

const TENANTS_YAML: &str = r#"
domain: hier
descriptors:
  - key: tenant
    rate_limits:
      - {name: per_tenant, unit: minute, requests_per_unit: 40}
      - {name: global, unit: minute, requests_per_unit: 60, shared: true}
"#;

/// 2 tenants × 100 concurrent calls, spread over `pool`: each tenant at most 40 OK, together
/// exactly 60 (the shared limit), never more.
async fn two_tenants_share_a_global_limit(pool: &[Client]) {
    avoid_minute_boundary(Duration::from_secs(15)).await;
    let tenant = |i: usize| if i.is_multiple_of(2) { "t1" } else { "t2" };
    // Each tenant's calls alternate over the clients (and so over the instances).
    let calls = (0..200)
        .map(|i| {
            (
                pool[(i / 2) % pool.len()].clone(),
                common::req("hier", &[&[("tenant", tenant(i))]]),
            )
        })
        .collect();
    let codes = overall_codes(&burst(calls).await);
    let ok_of = |t: &str| {
        codes
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c == OK && tenant(i) == t)
            .count()
    };
    let (t1, t2) = (ok_of("t1"), ok_of("t2"));
    println!("two tenants, 100 concurrent calls each: t1 {t1} OK, t2 {t2} OK");
    assert!(t1 <= 40, "tenant t1 got {t1} OK, its limit is 40");
    assert!(t2 <= 40, "tenant t2 got {t2} OK, its limit is 40");
    assert_eq!(
        t1 + t2,
        60,
        "OK answers of both tenants together (shared limit 60); t1 {t1}, t2 {t2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_and_shared_limits_in_different_slots_stay_exact_across_instances() {
    let cluster = blocking(redis_cluster);
    let prefix = "tenants:";
    let a = start_on_redis(&cluster.seed_url(), prefix, TENANTS_YAML).await;
    let b = start_on_redis(&cluster.seed_url(), prefix, TENANTS_YAML).await;
    let pool = clients(&[&a, &b], 4).await;

    two_tenants_share_a_global_limit(&pool).await;

    // The counters really are in different slots: the tenants' own keys carry the tenant's
    // tag, the shared key a tag of its own.
    let keys = blocking(|| keys_with_prefix(cluster, prefix));
    let find = |what: &str, pred: &dyn Fn(&str) -> bool| -> String {
        let found: Vec<&String> = keys.iter().filter(|k| pred(k)).collect();
        assert_eq!(found.len(), 1, "one {what} key expected among {keys:?}");
        found[0].clone()
    };
    let t1 = find("tenant t1", &|k| k.contains("{hier|tenant=t1}"));
    let t2 = find("tenant t2", &|k| k.contains("{hier|tenant=t2}"));
    let shared = find("shared", &|k| {
        redis_hash_tag(k).is_some_and(|t| t.ends_with("|*"))
    });
    assert_eq!(keys.len(), 3, "exactly the three counters: {keys:?}");
    let slot = |k: &str| blocking(|| cluster.slot_of(k));
    let (s1, s2, ss) = (slot(&t1), slot(&t2), slot(&shared));
    println!("slots: {t1} -> {s1}, {t2} -> {s2}, {shared} -> {ss}");
    assert_ne!(ss, s1, "the shared counter must have a slot of its own");
    assert_ne!(ss, s2, "the shared counter must have a slot of its own");

    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_and_shared_limits_stay_exact_on_the_memory_store() {
    let server = common::start(TENANTS_YAML, Settings::default()).await;
    let pool = clients(&[&server], 4).await;
    two_tenants_share_a_global_limit(&pool).await;
    server.stop().await;
}

/// A tenant at its own limit keeps calling while another tenant still has room under the
/// shared limit. Denied calls may briefly hold the shared counter (a placement group charged,
/// then refunded), so a burst may under-admit; but once the burst is answered the room must be
/// there again: calls made one at a time afterwards get exactly what is left, never more.
async fn a_full_tenant_does_not_starve_the_other(pool: &[Client]) {
    avoid_minute_boundary(Duration::from_secs(20)).await;
    let call_as = |i: usize, tenant: &str| {
        let mut client = pool[i % pool.len()].clone();
        let req = common::req("hier", &[&[("tenant", tenant)]]);
        async move {
            try_call(&mut client, req)
                .await
                .map(|r| r.overall_code)
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
        }
    };
    for i in 0..40 {
        assert_eq!(call_as(i, "t1").await, Ok(OK), "t1 call {i} of its 40");
    }
    // t1 is at its limit, the shared limit at 40 of 60: t2 has 20 left.
    let tenant = |i: usize| if i.is_multiple_of(4) { "t2" } else { "t1" };
    let calls = (0..200)
        .map(|i| {
            (
                pool[(i / 4) % pool.len()].clone(),
                common::req("hier", &[&[("tenant", tenant(i))]]),
            )
        })
        .collect();
    let codes = overall_codes(&burst(calls).await);
    let ok_of = |t: &str| {
        codes
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c == OK && tenant(i) == t)
            .count()
    };
    let (t1_burst, t2_burst) = (ok_of("t1"), ok_of("t2"));
    let mut t2_after = 0;
    for i in 0..40 {
        let code = call_as(i, "t2").await.expect("a call after the burst");
        t2_after += usize::from(code == OK);
    }
    println!(
        "t1 full (40), then 150 t1 + 50 t2 at once: t1 {t1_burst} OK, t2 {t2_burst} OK; \
         then 40 t2 calls one at a time: {t2_after} OK"
    );
    assert_eq!(t1_burst, 0, "t1 was already at its limit of 40");
    assert!(
        t2_burst <= 20,
        "t2 got {t2_burst} OK in the burst, 20 were left"
    );
    assert_eq!(
        t2_burst + t2_after,
        20,
        "t2 must get the 20 the shared limit has left: {t2_burst} in the burst, {t2_after} \
         one at a time afterwards"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_tenant_does_not_starve_the_other_across_instances() {
    let cluster = blocking(redis_cluster);
    let prefix = "starve:";
    let a = start_on_redis(&cluster.seed_url(), prefix, TENANTS_YAML).await;
    let b = start_on_redis(&cluster.seed_url(), prefix, TENANTS_YAML).await;
    let pool = clients(&[&a, &b], 4).await;
    a_full_tenant_does_not_starve_the_other(&pool).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_tenant_does_not_starve_the_other_on_the_memory_store() {
    let server = common::start(TENANTS_YAML, Settings::default()).await;
    let pool = clients(&[&server], 4).await;
    a_full_tenant_does_not_starve_the_other(&pool).await;
    server.stop().await;
}

/// Values that mean something to a key's structure, to Redis hash tags or to escaping.
fn hostile_values() -> Vec<String> {
    let mut values: Vec<String> = [
        "a",
        "a}b",
        "a%7Db",
        "}{",
        "a}b{c",
        "{",
        "}",
        "{}",
        "{a}",
        "|",
        "=",
        "*",
        "%",
        "%7B",
        "%7b",
        "%25",
        "%2A",
        "a*",
        "a|k2=b",
        "a}|k2=b",
        "k2=b",
        "ü日本🎉",
        "\n",
        "\0",
        " ",
        "",
    ]
    .iter()
    .map(|v| v.to_string())
    .collect();
    values.push("x".repeat(1000));
    values.push("}{".repeat(500));
    values.push("%7D".repeat(333));
    values
}

/// The hash tag `src/plan/mod.rs` documents for a descriptor: the domain and the first entry, with
/// `%{}|=*` and ASCII controls percent-escaped.
fn documented_tag(domain: &str, key: &str, value: &str) -> String {
    let escape = |s: &str| {
        s.chars()
            .map(|c| match c {
                '%' | '{' | '}' | '|' | '=' | '*' => format!("%{:02X}", c as u32),
                c if c.is_ascii_control() => format!("%{:02X}", c as u32),
                c => c.to_string(),
            })
            .collect::<String>()
    };
    format!("{}|{}={}", escape(domain), escape(key), escape(value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_descriptors_route_on_the_cluster_and_never_share_a_counter() {
    let cluster = blocking(redis_cluster);
    let prefix = "hostile:";
    let weird_key = "we}ird{key|=*";
    let yaml = format!(
        r#"
domain: bad
descriptors:
  - key: k
    rate_limit: {{unit: minute, requests_per_unit: 1}}
    descriptors:
      - key: k2
        rate_limit: {{unit: minute, requests_per_unit: 1}}
  - key: "{weird_key}"
    rate_limit: {{unit: minute, requests_per_unit: 1}}
"#
    );
    let server = start_on_redis(&cluster.seed_url(), prefix, &yaml).await;
    let mut client = server.client().await;

    let values = hostile_values();
    let mut descriptors: Vec<RateLimitDescriptor> = Vec::new();
    // A key-only rule: every value its own counter.
    for v in &values {
        descriptors.push(descriptor(&[("k", v)]));
    }
    // Two levels: separators in either value must not make `a`+`b_c` meet `a_b`+`c`.
    for (v, w) in [
        ("a", "b"),
        ("a", "b|k2=c"),
        ("a|k2=b", "c"),
        ("a", "}b"),
        ("a}", "b"),
        ("}{", "{}"),
        ("a}b{c", "a}b{c"),
        ("ü", "日本"),
    ] {
        descriptors.push(descriptor(&[("k", v), ("k2", w)]));
    }
    // Separators in the entry key (a rule for that key, and request-side overrides that work
    // for any key): `x=y`+`z` must not meet `x`+`y=z`.
    for v in ["a", "}", "{x}"] {
        descriptors.push(descriptor(&[(weird_key, v)]));
    }
    for entries in [
        &[("x=y", "z")][..],
        &[("x", "y=z")],
        &[("x{y}", "a")],
        &[("x", "{y}a")],
        &[("x|y", "a")],
        &[("x", "y|a")],
        &[("x}", "{a")],
        &[("x", "a"), ("y", "b")],
        &[("x", "a|y=b")],
        &[("{", "}"), ("}", "{")],
    ] {
        descriptors.push(with_override(descriptor(entries), 1, MINUTE));
    }
    for (i, a) in descriptors.iter().enumerate() {
        for b in &descriptors[..i] {
            assert_ne!(a, b, "test descriptors must be distinct");
        }
    }

    avoid_minute_boundary(Duration::from_secs(20)).await;
    let mut failures = Vec::new();
    for (round, want) in [(1, OK), (2, OVER_LIMIT)] {
        for d in &descriptors {
            match try_call(&mut client, request("bad", vec![d.clone()])).await {
                Ok(resp) if resp.overall_code == want => {}
                Ok(resp) => failures.push(format!(
                    "round {round}: {:?} answered overall {} (want {want}): a counter is shared",
                    d.entries, resp.overall_code
                )),
                Err(status) => failures.push(format!(
                    "round {round}: {:?} failed: {:?} {}",
                    d.entries,
                    status.code(),
                    status.message()
                )),
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));

    // One counter per descriptor, each under the hash tag of its own first entry: no value
    // moved a key to another slot.
    let keys = blocking(|| keys_with_prefix(cluster, prefix));
    assert_eq!(
        keys.len(),
        descriptors.len(),
        "one counter per descriptor; found {keys:?}"
    );
    let found: BTreeSet<String> = keys
        .iter()
        .map(|k| {
            let rest = k
                .strip_prefix(prefix)
                .and_then(|k| k.strip_prefix(KEY_FORMAT))
                .expect("key has the prefix and the format version");
            assert!(
                rest.starts_with('{'),
                "key {k:?} does not start with its tag"
            );
            redis_hash_tag(rest)
                .unwrap_or_else(|| panic!("key {k:?} has no hash tag"))
                .to_string()
        })
        .collect();
    let expected: BTreeSet<String> = descriptors
        .iter()
        .map(|d| documented_tag("bad", &d.entries[0].key, &d.entries[0].value))
        .collect();
    assert_eq!(found, expected, "hash tags of the stored keys");

    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_arrive_together_share_a_script_and_a_failing_call_fails_alone() {
    let redis = blocking(RedisServer::start);
    let prefix = unique_prefix();
    let yaml = "domain: batch\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";
    let server = start_on_redis(&redis.url(), &prefix, yaml).await;
    avoid_minute_boundary(Duration::from_secs(10)).await;
    let req = |value: &str| request("batch", vec![descriptor(&[("k", value)])]);

    // A counter Redis cannot read as one: its key holds a hash.
    let mut client = server.client().await;
    let first = try_call(&mut client, req("bad")).await.expect("first call");
    assert_eq!(first.overall_code, OK);
    let keys = redis.cli(&["KEYS", &format!("{prefix}{KEY_FORMAT}*")]);
    let bad = keys.lines().next().expect("the counter's key").to_string();
    redis.cli(&["DEL", &bad]);
    redis.cli(&["HSET", &bad, "not", "a counter"]);

    // 64 calls at once on one connection: 31 tenants twice each, and the bad counter twice.
    let before = redis.evalsha_calls();
    let mut calls = Vec::new();
    for i in 0..31 {
        calls.push((client.clone(), req(&format!("v{i}"))));
        calls.push((client.clone(), req(&format!("v{i}"))));
    }
    calls.push((client.clone(), req("bad")));
    calls.push((client.clone(), req("bad")));
    let results = burst(calls).await;
    let scripts = redis.evalsha_calls() - before;
    for (i, r) in results.iter().enumerate() {
        if i >= 62 {
            let e = r.as_ref().expect_err("the bad counter's call fails");
            assert!(e.starts_with("Unavailable"), "{e}");
        } else {
            assert_eq!(r.as_ref().map(|r| r.overall_code), Ok(OK), "call {i}");
        }
    }
    assert!(
        scripts < 64,
        "64 calls that arrived together took {scripts} EVALSHA calls: none were batched"
    );

    // Exact: each tenant has 1 of its 3 left.
    for i in 0..31 {
        let mut codes = Vec::new();
        for _ in 0..2 {
            let r = try_call(&mut client, req(&format!("v{i}"))).await;
            codes.push(r.expect("call").overall_code);
        }
        assert_eq!(codes, [OK, OVER_LIMIT], "tenant v{i}");
    }
    server.stop().await;
}
