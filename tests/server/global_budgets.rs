//! The budget a platform sets globally (issue 60 part 2, docs/multi-region.md): a daily budget
//! in money, in a time zone (`calendar: day`, `spend:`), shared by two regions, spent through
//! reservations. `eu` is home; `us` reaches eu's Redis through the test's delaying proxy, 40 ms
//! each way. Both regions reserve each call's estimate and settle it to what it used, half of
//! the calls above their estimate, until the budget is spent. Held:
//!
//! - each region is granted a lease of the calendar's day and spends from it;
//! - every µUSD of every settle is in a region's lease counter of that day (nothing lost);
//! - home counted everything spent: what the regions' settles landed past their grants
//!   (their excess) is counted as issued, so the regions spent at most what home issued, and
//!   home issued past the budget only that excess;
//! - every answer's `duration_until_reset` is the time to the zone's midnight, less 0.1% of
//!   it (the lease's drift margin, renewed by every answer from home, so not 0.1% of the
//!   day: 86 s), and `/counters` shows what each region holds until then.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::limit::calendar::{zone, Calendar, Period};
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;
use tollgate::pb::rls::RateLimitResponse;

use super::global_regions::{now_us, region_logs, regions_alone, start_regions, RegionSpec};
use crate::support::binary::Binary;
use crate::support::delay::DelayProxy;
use crate::support::redis::{cli_on, RedisServer};
use crate::support::server::{descriptor, http_client, request, TempConfig};

/// 10 USD a day, in µUSD.
const BUDGET: u64 = 10_000_000;
/// gpt-4o's output tokens: 10 USD a million, 10 µUSD each.
const PER_TOKEN: u64 = 10;
const ESTIMATE: u64 = 1_000;

const CONFIG: &str = "
domain: llm
prices:
  currency: USD
  per_million_tokens:
    gpt-4o: {input: 2.50, output: 10.00}
descriptors:
  - key: tenant_spend
    hierarchical: true
    rate_limit:
      name: all-tenants-daily-spend
      calendar: day
      timezone: Pacific/Kiritimati
      spend: 10
      shared: true
      global:
        home: eu
        regions: [eu, us]
";

fn kiritimati_day() -> Calendar {
    Calendar {
        period: Period::Day,
        zone: zone("Pacific/Kiritimati").expect("zone"),
        week_starts: jiff::civil::Weekday::Monday,
    }
}

/// What one region's load saw: reservations admitted and refused, µUSD settled, and each
/// answer's reset against the time to the zone's midnight then (µs).
#[derive(Debug, Default)]
struct Seen {
    admitted: u64,
    refused: u64,
    settled_usd: u64,
    resets: Vec<(u64, u64)>,
}

fn spend(tenant: &str, tokens: u64, last: (&str, &str)) -> tollgate::pb::rls::RateLimitRequest {
    let mut d = descriptor(&[
        ("tenant_spend", tenant),
        ("model", "gpt-4o"),
        ("kind", "output"),
        last,
    ]);
    d.hits_addend = Some(tokens);
    request("llm", vec![d])
}

fn reservation_id(r: &RateLimitResponse) -> Option<String> {
    let v = r
        .dynamic_metadata
        .as_ref()?
        .fields
        .get("tollgate.reservation")?;
    match &v.kind {
        Some(prost_types::value::Kind::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

/// One caller: reserve the estimate, use it for a moment, settle to the actual (every other
/// call 1.5× the estimate, the rest half), until `until`.
async fn caller(url: String, n: u64, until: Instant, seen: Arc<Mutex<Seen>>) {
    let channel = tonic::transport::Endpoint::from_shared(url)
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut client = RateLimitServiceClient::new(channel);
    let cal = kiritimati_day();
    let mut call = n;
    while Instant::now() < until {
        call += 1;
        let tenant = format!("t{}", call % 7);
        let r = client
            .should_rate_limit(spend(&tenant, ESTIMATE, ("tollgate.reserve", "estimate")))
            .await
            .expect("a reservation is answered")
            .into_inner();
        let now = now_us();
        let to_midnight = cal.end_of(now) - now;
        let reset = r.statuses[0]
            .duration_until_reset
            .map_or(0, |d| d.seconds as u64 * 1_000_000 + d.nanos as u64 / 1000);
        seen.lock().unwrap().resets.push((reset, to_midnight));
        if r.overall_code != Code::Ok as i32 {
            seen.lock().unwrap().refused += 1;
            tokio::time::sleep(Duration::from_millis(40)).await;
            continue;
        }
        let id = reservation_id(&r).expect("an admitted reservation carries its id");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let actual = if call.is_multiple_of(2) {
            ESTIMATE * 3 / 2
        } else {
            ESTIMATE / 2
        };
        let s = client
            .should_rate_limit(spend(&tenant, actual, ("tollgate.settle", &id)))
            .await
            .expect("a settle is answered")
            .into_inner();
        assert_eq!(
            s.overall_code,
            Code::Ok as i32,
            "a settle is never refused: {s:?}"
        );
        let mut seen = seen.lock().unwrap();
        seen.admitted += 1;
        seen.settled_usd += actual * PER_TOKEN;
    }
}

/// `redis-cli EVAL` of a one-line Lua body over `keys`.
fn eval(port: u16, body: &str, keys: &[&str]) -> String {
    let n = keys.len().to_string();
    let mut args = vec!["EVAL", body, n.as_str()];
    args.extend_from_slice(keys);
    cli_on(port, &args)
}

/// A region's lease counters of `window`: units counted there (spent and given back).
fn counted(port: u16, window: u64) -> u64 {
    let keys = cli_on(port, &["--scan", "--pattern", &format!("*|g{window}")]);
    keys.lines()
        .map(|k| {
            eval(
                port,
                "return math.floor(struct.unpack('<dd', redis.call('GET', KEYS[1])))",
                &[k],
            )
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("a count in {k}"))
        })
        .sum()
}

/// A field of a region's pool (`b:<window>` given back, `x:<window>` counted by home past its
/// grants), 0 when absent.
fn pool_field(port: u16, field: &str) -> u64 {
    let pool = cli_on(port, &["--scan", "--pattern", "*|pool"]);
    let pool = pool.lines().next().expect("a region's pool").to_string();
    cli_on(port, &["HGET", &pool, field])
        .trim()
        .parse()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daily_money_budget_across_regions_counts_every_settle_at_home() {
    let _alone = regions_alone().await;
    let names = ["eu", "us"];
    let redis: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let home = redis[0].port();
    let proxy = DelayProxy::start("127.0.0.1", home, Duration::from_millis(40)).await;
    let config = TempConfig::new(CONFIG);
    let specs: Vec<RegionSpec> = names
        .iter()
        .enumerate()
        .map(|(i, name)| RegionSpec {
            name,
            config: &config,
            redis_url: redis[i].url(),
            extra: match i {
                1 => vec![
                    "--region-redis".into(),
                    format!("eu=redis://127.0.0.1:{}", proxy.port),
                ],
                _ => Vec::new(),
            },
        })
        .collect();
    let tollgates = start_regions(&specs).await;
    let logs = |tollgates: &[Binary]| region_logs(&names, tollgates);
    let day = kiritimati_day().index(now_us());

    // Eight callers a region until the budget is spent (about 1,000 calls in all), and on.
    let until = Instant::now() + Duration::from_secs(9);
    let seen: Vec<Arc<Mutex<Seen>>> = (0..2).map(|_| Arc::default()).collect();
    let mut callers = Vec::new();
    for (i, t) in tollgates.iter().enumerate() {
        for n in 0..8 {
            let url = format!("http://127.0.0.1:{}", t.grpc_port());
            callers.push(tokio::spawn(caller(url, n * 1_000, until, seen[i].clone())));
        }
    }
    for c in callers {
        c.await.expect("a caller");
    }

    // What an operator reads: each region's lease of the day, until the zone's midnight.
    let http = http_client();
    for t in &tollgates {
        let body = http
            .get(format!(
                "{}/counters?domain=llm&descriptor=tenant_spend%3Dt1%2Cmodel%3Dgpt-4o%2Ckind%3Doutput",
                t.http_url
            ))
            .send()
            .await
            .expect("GET /counters")
            .text()
            .await
            .expect("a body");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON counters");
        let c = &v["counters"][0];
        let to_midnight_s = (kiritimati_day().end_of(now_us()) - now_us()) / 1_000_000 + 1;
        let reset = c["reset_after_s"].as_u64().expect("reset_after_s");
        assert!(
            reset <= to_midnight_s && reset + 200 >= to_midnight_s,
            "/counters resets at the zone's midnight ({to_midnight_s} s): {c}"
        );
    }

    // Let each region's refill task report what it spent since its last ask.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let seen: Vec<Seen> = seen
        .iter()
        .map(|s| std::mem::take(&mut *s.lock().unwrap()))
        .collect();
    let ports = [redis[0].port(), redis[1].port()];
    let counted: Vec<u64> = ports.iter().map(|&p| counted(p, day)).collect();
    let back: Vec<u64> = ports
        .iter()
        .map(|&p| pool_field(p, &format!("b:{day}")))
        .collect();
    let owed: Vec<u64> = ports
        .iter()
        .map(|&p| pool_field(p, &format!("x:{day}")))
        .collect();
    let authority = cli_on(home, &["--scan", "--pattern", "*|authority"]);
    let authority = cli_on(
        home,
        &["GET", authority.lines().next().expect("the authority")],
    );
    let state: serde_json::Value = serde_json::from_str(&authority).expect("the authority's state");
    let (window, issued) = (
        state["window"].as_u64().expect("window"),
        state["issued"].as_u64().expect("issued"),
    );
    let seen_summary: Vec<(u64, u64, u64)> = seen
        .iter()
        .map(|s| (s.admitted, s.refused, s.settled_usd))
        .collect();
    let report = format!(
        "admitted, refused, settled {seen_summary:?}; counted {counted:?}, given back {back:?}, owed {owed:?}; authority \
         window {window} issued {issued}; {}",
        logs(&tollgates)
    );
    assert_eq!(
        window, day,
        "the authority's window is the zone's day: {report}"
    );
    assert!(
        seen.iter().all(|s| s.admitted > 0) && seen.iter().map(|s| s.refused).sum::<u64>() > 0,
        "each region spent a lease of the day, and the budget ran out: {seen_summary:?}; {report}"
    );
    let spent: Vec<u64> = counted.iter().zip(&back).map(|(c, b)| c - b).collect();
    let settled: Vec<u64> = seen.iter().map(|s| s.settled_usd).collect();
    assert_eq!(
        spent, settled,
        "every settle's µUSD is in its region's lease counter: {report}"
    );
    assert!(
        owed.iter().sum::<u64>() > 0,
        "settles landed past the regions' grants, and home counted them: {report}"
    );
    assert!(
        spent.iter().sum::<u64>() <= issued,
        "the regions spent no more than home counted as issued: {report}"
    );
    assert!(
        issued <= BUDGET + owed.iter().sum::<u64>(),
        "home issued past the budget only what settles spent past grants: {report}"
    );
    for (s, region) in seen.iter().zip(names) {
        for &(reset, to_midnight) in &s.resets {
            // A lease lapses early by 0.1% of the time left when home last answered (clock
            // drift), not of the day; an answer's reset is in whole seconds, rounded up.
            assert!(
                reset <= to_midnight + 1_000_000
                    && reset + to_midnight / 1_000 + 2_000_000 >= to_midnight,
                "{region}: a reset of {reset} µs with {to_midnight} µs to midnight"
            );
        }
    }
}
