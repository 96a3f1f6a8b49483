//! The promise under a hostile network, and the pieces one at a time.

use super::authority::Authority;
use super::region::{Admit, Region};
use super::terms::{Ask, Grant, Kind, OnPartition, Settings};

fn settings(limit: u64) -> Settings {
    Settings {
        kind: Kind::Window {
            limit,
            window_us: 1_000_000,
        },
        on_partition: OnPartition::SafeShare(0.05),
        period_us: 50_000,
        silent_after_us: 200_000,
        lifetime_us: 500_000,
        caution_us: 100_000,
    }
}

#[test]
fn grants_never_exceed_the_limit_and_lapse_with_the_window() {
    let s = settings(100);
    let mut a = Authority::new(s, 2, 0);
    let ask = |region, want| Ask {
        region,
        want,
        demand: 50.0,
        target: want,
        given_back: 0,
        window: 0,
        next: false,
    };
    let g = a.grant(&ask(0, 80), 10);
    let h = a.grant(&ask(1, 80), 20);
    assert!(g.units + h.units <= 100, "{g:?} {h:?}");
    assert_eq!(g.lifetime_us, 1_000_000 - 10);
    let mut r = Region::new(0, s, 10_000, 0);
    r.answered(&g, 5, 15);
    // Counted from the ask's sending (5), the lease lapses 5 µs before the window ends.
    assert_eq!(r.headroom(999_994), g.units);
    assert_eq!(
        r.headroom(999_995),
        0,
        "the lease lapses no later than the window ends"
    );
}

#[test]
fn a_silent_region_has_its_safe_share_counted_before_it_spends_it() {
    let s = settings(100);
    let mut a = Authority::new(s, 2, 0);
    let hb = Ask {
        region: 1,
        want: 0,
        demand: 0.0,
        target: 0,
        given_back: 0,
        window: 0,
        next: false,
    };
    a.grant(&hb, 0);
    a.advance(200_000);
    assert_eq!(a.issued(), 5);
    let mut r = Region::new(1, s, 10_000, 0);
    assert_eq!(r.admit(1, 100_000), Admit::Refused, "not cut off yet");
    assert_eq!(r.admit(1, 250_000), Admit::SafeShare);
}

/// Three regions, asks and answers delayed at random (up to 300 ms) or lost, demand
/// jumping between them: no window ever admits more than the limit.
#[test]
fn no_window_admits_more_than_the_limit_whatever_the_network_does() {
    let s = Settings {
        on_partition: OnPartition::Refuse,
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
                    net.push((now + rand() % 150_000, r, sent, Err(g)));
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
    assert!(admitted.iter().all(|&n| n <= 500), "{admitted:?}");
    assert!(
        admitted.iter().skip(1).filter(|&&n| n >= 450).count() >= 15,
        "the limit is used: {admitted:?}"
    );
}
