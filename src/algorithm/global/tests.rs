//! The promise under a hostile network, and the pieces one at a time.

use super::authority::Authority;
use super::region::{Admit, Region};
use super::terms::{Ask, GlobalLimit, Grant, Kind, OnPartition};

fn settings(limit: u64) -> GlobalLimit {
    GlobalLimit {
        kind: Kind::Window {
            limit,
            window_us: 1_000_000,
            calendar: None,
        },
        on_partition: OnPartition::SafeShare(0.05),
        period_us: 50_000,
        silent_after_us: 200_000,
        lifetime_us: 500_000,
        caution_us: 100_000,
    }
}

/// A heartbeat from `region` (it wants nothing), confirming the answer of `last_answer`.
fn heartbeat(region: usize, last_answer: Option<u64>) -> Ask {
    Ask {
        region,
        want: 0,
        demand: 0.0,
        target: 0,
        given_back: 0,
        window: 0,
        next: false,
        last_answer,
        held: [(0, 0); 2],
        excess: [(0, 0); 2],
    }
}

#[test]
fn grants_never_exceed_the_limit_and_lapse_with_the_window() {
    let s = settings(100);
    let mut a = Authority::new(s, 2, 0);
    let ask = |region, want| Ask {
        want,
        demand: 50.0,
        target: want,
        ..heartbeat(region, None)
    };
    let g = a.grant(&ask(0, 80), 10);
    let h = a.grant(&ask(1, 80), 20);
    assert!(g.units + h.units <= 100, "{g:?} {h:?}");
    assert_eq!(g.lifetime_us, 1_000_000 - 10);
    let mut r = Region::new(0, s, 10_000, 0);
    r.answered(&g, 5, 15);
    // Counted from the ask's sending (5), less 0.1% for clock drift: the lease lapses 1,004 µs
    // before the window ends.
    assert_eq!(r.headroom(998_995), g.units);
    assert_eq!(
        r.headroom(998_996),
        0,
        "the lease lapses no later than the window ends"
    );
}

#[test]
fn a_silent_region_has_its_safe_share_counted_before_it_spends_it() {
    let s = settings(100);
    let mut a = Authority::new(s, 1, 0);
    let hb = heartbeat(0, None);
    // The region's one answer came at 10 (sent at 0 by the authority's clock).
    let g = a.grant(&hb, 0);
    a.advance(199_999);
    assert_eq!(a.issued(), 0, "not silent yet");
    a.advance(200_000);
    assert_eq!(a.issued(), 5, "silent since the answer it last confirmed");
    let mut r = Region::new(0, s, 10_000, 0);
    assert_eq!(
        r.admit(1, 5),
        Admit::Refused,
        "no answer yet: no window known"
    );
    r.answered(&g, 0, 10);
    assert_eq!(r.admit(1, 100_000), Admit::Refused, "not cut off yet");
    assert_eq!(r.admit(1, 250_000), Admit::SafeShare, "cut off since 10");
    for _ in 1..5 {
        assert_eq!(r.admit(1, 300_000), Admit::SafeShare);
    }
    assert_eq!(
        r.admit(1, 300_000),
        Admit::Refused,
        "one share of 5 per window"
    );
    // An answer comes and goes: still the same window's share.
    r.answered(&g, 310_000, 320_000);
    assert_eq!(
        r.admit(1, 900_000),
        Admit::Refused,
        "the share is per window"
    );
}

/// Three regions, asks and answers delayed at random (up to 300 ms in all) or lost, demand
/// jumping between them, a quarter of the answers lost too with `lose_answers`: what each
/// window admitted.
fn lossy(on_partition: OnPartition, lose_answers: bool) -> Vec<u64> {
    let s = GlobalLimit {
        on_partition,
        ..settings(500)
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut a = Authority::new(s, 3, 0);
    let mut regions: Vec<Region> = (0..3).map(|r| Region::new(r, s, 50_000, 0)).collect();
    // (arrives at, region, sent at, the ask, or the answer)
    let mut net: Vec<(u64, usize, u64, Result<Ask, Grant>)> = Vec::new();
    let mut admitted = vec![0u64; 21];
    let mut now = 0;
    while now < 20_000_000 {
        let mut due: Vec<_> = Vec::new();
        net.retain(|m| {
            if m.0 <= now {
                due.push(*m);
                false
            } else {
                true
            }
        });
        for (_, r, sent, m) in due {
            match m {
                Ok(ask) => {
                    let g = a.grant(&ask, now);
                    if !lose_answers || rand() % 4 != 0 {
                        net.push((now + rand() % 150_000, r, sent, Err(g)));
                    }
                }
                Err(g) => regions[r].answered(&g, sent, now),
            }
        }
        for (r, region) in regions.iter_mut().enumerate() {
            if let Some(ask) = region.tick(now) {
                if rand() % 10 != 0 {
                    net.push((now + rand() % 150_000, r, now, Ok(ask)));
                }
            }
            // Demand moves between regions every 2 s; 3 requests a ms at most.
            let hot = (now / 2_000_000) as usize % 3 == r;
            for _ in 0..(rand() % if hot { 4 } else { 2 }) {
                if region.admit(1, now) != Admit::Refused {
                    admitted[(now / 1_000_000) as usize] += 1;
                }
            }
        }
        now += 1_000;
    }
    admitted
}

#[test]
fn no_window_admits_more_than_the_limit_whatever_the_network_does() {
    let admitted = lossy(OnPartition::Refuse, true);
    assert!(admitted.iter().all(|&n| n <= 500), "{admitted:?}");
    let admitted = lossy(OnPartition::Refuse, false);
    assert!(admitted.iter().all(|&n| n <= 500), "{admitted:?}");
    assert!(
        admitted.iter().skip(1).filter(|&&n| n >= 450).count() >= 15,
        "the limit is used: {admitted:?}"
    );
}

/// With a safe share of 5%, a quarter of the answers lost as well: regions go silent and come
/// back again and again, and each may spend one share per window, so a window admits at most
/// the limit plus one share per region (the bound when every silence begins after the limit
/// was all issued); never a second share.
#[test]
fn safe_shares_are_spent_once_per_window_and_counted() {
    let admitted = lossy(OnPartition::SafeShare(0.05), true);
    assert!(admitted.iter().all(|&n| n <= 500 + 3 * 25), "{admitted:?}");
}

/// Asks arrive but every answer is lost: the region counts itself cut off from its last answer,
/// so the authority must too, though it hears the region every period.
#[test]
fn a_region_whose_answers_are_lost_is_silent_though_its_asks_arrive() {
    let s = settings(100);
    let mut a = Authority::new(s, 1, 0);
    // The last answer it received was the one of time 0.
    let ask = |t: u64| heartbeat(0, Some(0).filter(|_| t > 0));
    let mut t = 0;
    while t < 200_000 {
        a.grant(&ask(t), t);
        assert_eq!(a.issued(), 0, "at {t}");
        t += 50_000;
    }
    a.grant(&ask(t), t);
    assert_eq!(a.issued(), 5, "silent since its last answer, at {t}");
}

#[test]
fn a_new_authority_counts_what_the_regions_report_holding() {
    let s = settings(1000);
    let mut old = Authority::new(s, 2, 0);
    let ask = |region, want, next| Ask {
        want,
        demand: 50.0,
        target: want,
        next,
        ..heartbeat(region, None)
    };
    // Both regions hold 50 of window 0 and 50 of window 1 (asked near the end of window 0).
    let mut regions = [Region::new(0, s, 10_000, 0), Region::new(1, s, 10_000, 0)];
    for (i, r) in regions.iter_mut().enumerate() {
        let g = old.grant(&ask(i, 50, false), 10);
        r.answered(&g, 10, 20);
        let n = old.grant(&ask(i, 50, true), 900_000);
        r.answered(&n, 900_000, 900_010);
        assert_eq!((g.units, n.units), (50, 50));
    }
    assert_eq!(regions[0].held(), [(0, 50), (1, 50)]);
    // Home's state is lost at 950 ms: a new authority, cautious for 100 ms, hears each
    // region's heartbeat (what it holds); in window 1 it counts their 100 as issued.
    let mut new = Authority::new(s, 2, 950_000);
    new.take_over(950_000);
    for (i, r) in regions.iter().enumerate() {
        let beat = Ask {
            held: r.held(),
            ..heartbeat(i, None)
        };
        new.grant(&beat, 960_000 + i as u64);
    }
    let g = new.grant(&ask(0, 50, false), 1_060_000);
    assert_eq!((g.window, g.units, new.issued()), (1, 50, 150));
    // Without the reports the new authority would not know of them.
    let mut blind = Authority::new(s, 2, 950_000);
    blind.take_over(950_000);
    blind.grant(&ask(0, 50, false), 1_060_000);
    assert_eq!(blind.issued(), 50);
}

#[test]
fn regions_are_kept_by_name_when_the_config_adds_or_reorders_them() {
    let s = settings(100);
    let names = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let us_asks = Ask {
        want: 10,
        demand: 5.0,
        target: 10,
        held: [(0, 7), (0, 0)],
        ..heartbeat(1, None)
    };
    let mut a = Authority::named(s, &names(&["eu", "us"]), 0);
    a.grant(&us_asks, 10);
    a.reconfigure(s, &names(&["ap", "us", "eu"]));
    let v = serde_json::to_value(&a).expect("state");
    assert_eq!(v["names"], serde_json::json!(["ap", "us", "eu"]));
    assert_eq!(v["regions"][1]["held"][0], serde_json::json!([0, 7]), "{v}");
    assert_eq!(v["regions"][0]["held"][0], serde_json::json!([0, 0]), "{v}");
    // A region one config no longer lists keeps its books, after the others.
    a.reconfigure(s, &names(&["eu", "ap"]));
    let v = serde_json::to_value(&a).expect("state");
    assert_eq!(v["names"], serde_json::json!(["eu", "ap", "us"]));
    assert_eq!(v["regions"][2]["held"][0], serde_json::json!([0, 7]), "{v}");
    // A state written without names (0.1.0's) numbered regions by place.
    let mut old = Authority::new(s, 2, 0);
    old.grant(&us_asks, 10);
    let mut state = serde_json::to_value(&old).expect("state");
    state.as_object_mut().expect("an object").remove("names");
    let mut read: Authority = serde_json::from_value(state).expect("0.1.0's state reads");
    read.reconfigure(s, &names(&["eu", "us"]));
    let v = serde_json::to_value(&read).expect("state");
    assert_eq!(v["names"], serde_json::json!(["eu", "us"]));
    assert_eq!(v["regions"][1]["held"][0], serde_json::json!([0, 7]), "{v}");
}

#[test]
fn a_calendar_budget_grants_each_period_once_whatever_its_length() {
    use crate::limit::calendar::{zone, Calendar, Period};
    let at = |s: &str| s.parse::<jiff::Timestamp>().expect("time").as_microsecond() as u64;
    let cal = Calendar {
        period: Period::Month,
        zone: zone("America/New_York").expect("zone"),
        week_starts: jiff::civil::Weekday::Monday,
    };
    let s = GlobalLimit {
        kind: Kind::Window {
            limit: 1_000,
            window_us: 30 * 86_400_000_000,
            calendar: Some(cal),
        },
        on_partition: OnPartition::Refuse,
        ..settings(1_000)
    };
    // February 2027 in New York (28 days), then March (31, a DST change inside).
    let feb = s.window_of(at("2027-02-10T00:00:00Z"));
    let (mar_starts, apr_starts) = (at("2027-03-01T05:00:00Z"), at("2027-04-01T04:00:00Z"));
    assert_eq!(s.window_start(feb + 1), mar_starts);
    assert_eq!(s.window_len(feb + 1), apr_starts - mar_starts);
    let names = ["eu".to_string(), "us".to_string()];
    let mut a = Authority::named(s, &names, at("2027-02-01T06:00:00Z"));
    let late_feb = mar_starts - 10_000_000;
    let ask = |region, want, next| Ask {
        want,
        demand: 50.0,
        target: want,
        next,
        ..heartbeat(region, Some(late_feb))
    };
    let g = a.grant(&ask(0, 800, false), late_feb);
    assert_eq!(g.window, feb);
    assert!(g.units > 0 && g.units <= 800, "{g:?}");
    assert_eq!(
        g.lifetime_us,
        mar_starts - late_feb,
        "lapses as February ends"
    );
    let n = a.grant(&ask(1, 600, true), late_feb);
    assert_eq!(n.window, feb + 1, "March's units, asked ahead");
    assert!(n.units > 0 && n.units <= 600, "{n:?}");
    assert_eq!(n.starts_in_us, mar_starts - late_feb);
    assert_eq!(
        n.lifetime_us,
        apr_starts - late_feb,
        "spendable all of March"
    );
    let h = a.grant(&ask(1, 600, false), late_feb + 1);
    assert!(g.units + h.units <= 1_000, "February: {g:?} {h:?}");
    // March: what was issued ahead counts; never more than the limit in all.
    let m = a.grant(&ask(0, 800, false), mar_starts + 1);
    assert_eq!(m.window, feb + 1);
    assert!(
        n.units + m.units <= 1_000,
        "March issued ahead: {n:?} {m:?}"
    );
    assert_eq!(a.issued(), n.units + m.units);

    // A region cut off keeps the calendar's grid: its safe share is per period, each as long
    // as it is (February's end, then March's 31 days).
    let s = GlobalLimit {
        on_partition: OnPartition::SafeShare(0.05),
        ..s
    };
    let mut r = Region::new(0, s, 10_000, late_feb - 1_000);
    let g = Grant { units: 10, ..g };
    r.answered(&g, late_feb - 1_000, late_feb);
    let mid_march = at("2027-03-15T00:00:00Z");
    assert_eq!(r.lapsed(mid_march), 10, "February's lease lapsed");
    let (window, units, from, until) = r.safe_share_at(mid_march).expect("cut off");
    assert_eq!((window, units), (feb + 1, 50));
    // Late at the start, and early at the end, by the drift margin of the period counted on
    // since the last answer (0.1% of March: 45 minutes).
    let margin = (apr_starts - mar_starts) / 1_000;
    assert!(from >= mar_starts + margin && from < mar_starts + margin + 1_000_000);
    assert!(until <= apr_starts - margin && until > apr_starts - margin - 1_000_000);
}

#[test]
fn a_settle_s_excess_is_counted_by_home_once() {
    let s = GlobalLimit {
        on_partition: OnPartition::Refuse,
        ..settings(100)
    };
    let mut a = Authority::new(s, 2, 0);
    let ask = |region, excess| Ask {
        excess,
        ..heartbeat(region, Some(0))
    };
    let w = 0;
    a.grant(&ask(0, [(w, 0), (0, 0)]), 10);
    assert_eq!(a.issued(), 0);
    // Region 0's lease counter holds 7 past its grant: home counts them, once.
    a.grant(&ask(0, [(w, 7), (0, 0)]), 20);
    assert_eq!(a.issued(), 7);
    a.grant(&ask(0, [(w, 7), (0, 0)]), 30);
    assert_eq!(a.issued(), 7, "the same report again counts nothing");
    a.grant(&ask(0, [(w, 10), (0, 0)]), 40);
    assert_eq!(a.issued(), 10, "an increase counts what is new");
    a.grant(&ask(1, [(w, 5), (0, 0)]), 50);
    assert_eq!(a.issued(), 15, "each region's own");
    // The next window: a late settle on the last window's counter is a debt on this one.
    a.grant(&ask(0, [(w, 12), (w + 1, 0)]), 1_000_010);
    assert_eq!(a.issued(), 2, "two more of window 0, counted in window 1");
    let g = a.grant(
        &Ask {
            want: 200,
            demand: 10.0,
            target: 200,
            ..ask(0, [(w, 12), (w + 1, 0)])
        },
        1_000_020,
    );
    assert_eq!(g.units, 98, "the debt comes off what is left");
}

#[test]
fn a_quiet_region_asks_for_room_for_two_dear_requests() {
    let mut r = Region::new(0, settings(100_000), 10_000, 0);
    // A reservation of 4,096 tokens, refused for want of a lease: the rate it makes (about
    // 1,500 units over three round trips and periods) would never hold one.
    assert_eq!(r.admit(4_096, 1_000), Admit::Refused);
    let ask = r.tick(2_000).expect("an ask");
    assert!(ask.want >= 2 * 4_096, "room for two: {ask:?}");
    // Two seconds on, a request of one unit asks by the rate again.
    assert_eq!(r.admit(1, 2_500_000), Admit::Refused);
    let later = r.tick(2_600_000).expect("an ask");
    assert!(later.want < 4_096, "{later:?}");
}
