//! Calendar windows (`calendar:`, `timezone:`, `week_starts:`) on every store, at their edges:
//! the last second of a month in New York, both DST changes of a Berlin day (23 and 25 hours),
//! 29 February, New Year in Kiritimati (UTC+14), an ISO week, an overdraft budget, and a
//! calendar limit shared by every tenant. Each answer's reset is the next period's start, in
//! whole seconds rounded up. With the injected clock on every store, and on Redis and Cluster
//! with Redis's own clock (`--clock redis`, where the script picks the period by `TIME`).

use jiff::Timestamp;
use tollgate::base::clock::ManualClock;
use tollgate::pb::rls::RateLimitResponse;
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::any::AnyStore;
use tollgate::store::redis::options::ClockSource;

use crate::support::kit::{for_every_store, for_stores, limiter, store, store_with, StoreKind};
use crate::support::server::{descriptor, request, OK, OVER_LIMIT};

const CONFIG: &str = "\
domain: cal
descriptors:
  - key: ny_month
    rate_limit: {calendar: month, timezone: America/New_York, requests_per_unit: 2}
  - key: berlin_day
    rate_limit: {calendar: day, timezone: Europe/Berlin, requests_per_unit: 1}
  - key: utc_day
    rate_limit: {calendar: day, requests_per_unit: 1}
  - key: kiritimati_year
    rate_limit: {calendar: year, timezone: Pacific/Kiritimati, requests_per_unit: 1}
  - key: iso_week
    rate_limit: {calendar: week, requests_per_unit: 1}
  - key: sunday_week
    rate_limit: {calendar: week, week_starts: sunday, requests_per_unit: 1}
  - key: budget
    rate_limit: {calendar: month, timezone: Europe/Berlin, requests_per_unit: 100, overdraft: true}
  - key: tenant
    rate_limits:
      - {name: everyone-daily, calendar: day, timezone: Asia/Kolkata, requests_per_unit: 3, shared: true}
";

fn at(s: &str) -> u64 {
    let t: Timestamp = s.parse().expect("a timestamp");
    t.as_microsecond() as u64
}

/// One request on `key=value` costing `hits`: overall code, remaining and reset (seconds).
async fn ask(
    l: &RateLimiter<AnyStore>,
    key: &str,
    value: &str,
    hits: u64,
) -> (i32, u32, Option<i64>) {
    let mut d = descriptor(&[(key, value)]);
    d.hits_addend = Some(hits);
    let r: RateLimitResponse = l
        .should_rate_limit(&request("cal", vec![d]))
        .await
        .expect("a decision");
    let s = &r.statuses[0];
    (
        r.overall_code,
        s.limit_remaining,
        s.duration_until_reset.map(|d| d.seconds),
    )
}

const DAY: i64 = 86_400;

async fn edges(kind: StoreKind) {
    let clock = ManualClock::new(at("2027-02-01T04:59:58.5Z"));
    let l = limiter(CONFIG, Settings::default(), store(kind, &clock).await);

    // 31 January 23:59:58.5 in New York: 1.5 s of the month left, reported as 2 (rounded up).
    assert_eq!(ask(&l, "ny_month", "a", 1).await, (OK, 1, Some(2)));
    clock.set(at("2027-02-01T04:59:59Z"));
    assert_eq!(ask(&l, "ny_month", "a", 1).await, (OK, 0, Some(1)));
    assert_eq!(ask(&l, "ny_month", "a", 1).await.0, OVER_LIMIT);
    clock.set(at("2027-02-01T04:59:59.999999Z"));
    assert_eq!(ask(&l, "ny_month", "a", 1).await, (OVER_LIMIT, 0, Some(1)));
    // Midnight in New York: February, 28 days.
    clock.set(at("2027-02-01T05:00:00Z"));
    assert_eq!(ask(&l, "ny_month", "a", 1).await, (OK, 1, Some(28 * DAY)));

    // Berlin's spring-forward day has 23 hours; its autumn day 25.
    clock.set(at("2027-03-27T23:00:00Z"));
    assert_eq!(
        ask(&l, "berlin_day", "a", 1).await,
        (OK, 0, Some(23 * 3600))
    );
    clock.set(at("2027-03-28T21:59:59Z"));
    assert_eq!(
        ask(&l, "berlin_day", "a", 1).await,
        (OVER_LIMIT, 0, Some(1))
    );
    clock.set(at("2027-03-28T22:00:00Z"));
    assert_eq!(ask(&l, "berlin_day", "a", 1).await, (OK, 0, Some(DAY)));
    clock.set(at("2027-10-30T22:00:00Z"));
    assert_eq!(
        ask(&l, "berlin_day", "a", 1).await,
        (OK, 0, Some(25 * 3600))
    );
    clock.set(at("2027-10-31T22:59:59Z"));
    assert_eq!(ask(&l, "berlin_day", "a", 1).await.0, OVER_LIMIT);
    clock.set(at("2027-10-31T23:00:00Z"));
    assert_eq!(ask(&l, "berlin_day", "a", 1).await.0, OK);

    // 29 February 2028 is a day of its own.
    clock.set(at("2028-02-29T12:00:00Z"));
    assert_eq!(ask(&l, "utc_day", "a", 1).await, (OK, 0, Some(DAY / 2)));
    clock.set(at("2028-02-29T23:59:59Z"));
    assert_eq!(ask(&l, "utc_day", "a", 1).await.0, OVER_LIMIT);
    clock.set(at("2028-03-01T00:00:00Z"));
    assert_eq!(ask(&l, "utc_day", "a", 1).await.0, OK);

    // Kiritimati (UTC+14) greets 2028 at 10:00 UTC on 31 December 2027: a leap year.
    clock.set(at("2027-12-31T09:59:59Z"));
    assert_eq!(ask(&l, "kiritimati_year", "a", 1).await, (OK, 0, Some(1)));
    assert_eq!(ask(&l, "kiritimati_year", "a", 1).await.0, OVER_LIMIT);
    clock.set(at("2027-12-31T10:00:00Z"));
    assert_eq!(
        ask(&l, "kiritimati_year", "a", 1).await,
        (OK, 0, Some(366 * DAY))
    );

    // Thursday 7 January 2027: an ISO week ends on Monday the 11th, a Sunday week on the 10th.
    clock.set(at("2027-01-07T12:00:00Z"));
    assert_eq!(
        ask(&l, "iso_week", "a", 1).await,
        (OK, 0, Some(3 * DAY + DAY / 2))
    );
    assert_eq!(
        ask(&l, "sunday_week", "a", 1).await,
        (OK, 0, Some(2 * DAY + DAY / 2))
    );

    // A monthly budget with overdraft: the charge that crosses it lands whole, and the tenant
    // is refused until the month renews (1 March 00:00 in Berlin is 28 Feb 23:00 UTC).
    clock.set(at("2027-02-20T10:00:00Z"));
    assert_eq!(ask(&l, "budget", "t", 90).await.0, OK);
    assert_eq!(ask(&l, "budget", "t", 60).await.0, OK);
    let (code, remaining, reset) = ask(&l, "budget", "t", 1).await;
    assert_eq!((code, remaining), (OVER_LIMIT, 0));
    assert_eq!(reset, Some(8 * DAY + 13 * 3600));
    clock.set(at("2027-02-28T23:00:00Z"));
    assert_eq!(ask(&l, "budget", "t", 1).await.0, OK);

    // A calendar limit shared by every tenant: India's day, three requests in all.
    clock.set(at("2027-05-01T18:29:00Z"));
    for tenant in ["a", "b", "c"] {
        assert_eq!(ask(&l, "tenant", tenant, 1).await.0, OK);
    }
    assert_eq!(ask(&l, "tenant", "d", 1).await, (OVER_LIMIT, 0, Some(60)));
    clock.set(at("2027-05-01T18:30:00Z"));
    assert_eq!(ask(&l, "tenant", "d", 1).await.0, OK);
}

#[test]
fn calendar_windows_at_their_edges_on_every_store() {
    for_every_store(edges);
}

/// With `--clock redis`, the script picks the period by Redis's `TIME` among the two period ends
/// tollgate sends: the reset is the real time to the next UTC midnight.
async fn on_redis_time(kind: StoreKind) {
    let clock = ManualClock::new(0);
    let store = store_with(kind, &clock, |s| s.clock = ClockSource::Redis).await;
    let l = limiter(CONFIG, Settings::default(), store);
    let now = Timestamp::now().as_second();
    let to_midnight = DAY - now.rem_euclid(DAY);
    let (code, remaining, reset) = ask(&l, "utc_day", "redis-time", 1).await;
    assert_eq!((code, remaining), (OK, 0));
    let reset = reset.expect("a reset");
    assert!(
        (reset - to_midnight).abs() <= 2,
        "reset {reset} s, the next UTC midnight is {to_midnight} s away"
    );
    assert_eq!(ask(&l, "utc_day", "redis-time", 1).await.0, OVER_LIMIT);
}

#[test]
fn calendar_windows_on_redis_time() {
    for_stores(&[StoreKind::Redis, StoreKind::Cluster], on_redis_time);
}
