//! Calendar windows: a `fixed_window` limit whose window is the calendar day, week, month,
//! quarter or year that holds now, in an IANA time zone (`calendar:`, `timezone:`,
//! `week_starts:`). Days are 23 or 25 hours across a DST change, months have their real
//! length, leap years their 29 February.
//!
//! The time zone database is compiled into the binary (jiff's bundled copy), so every instance
//! agrees on every boundary whatever its host has installed.
//!
//! A window is found from `now` alone ([`Calendar::end_of`]), which is what the memory store
//! and the Rust algorithms use. The Redis script cannot run this: under `--clock redis` it
//! decides by Redis's `TIME`, which Rust does not know. So Rust sends it two period ends
//! around its own now ([`Calendar::choices`]), and the script picks the first one after its
//! `TIME`: one clock per decision, Redis's, as for every other algorithm.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// The calendar period a window spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

/// The accepted `calendar:` names, for error messages.
pub const PERIOD_NAMES: &str = "day, week, month, quarter or year";

impl Period {
    pub fn parse(s: &str) -> Option<Period> {
        Some(match s.to_ascii_lowercase().as_str() {
            "day" => Period::Day,
            "week" => Period::Week,
            "month" => Period::Month,
            "quarter" => Period::Quarter,
            "year" => Period::Year,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Quarter => "quarter",
            Period::Year => "year",
        }
    }

    /// The unit the response reports (a quarter as `UNKNOWN`: Envoy's enum has none).
    pub fn unit(self) -> crate::limit::unit::Unit {
        use crate::limit::unit::Unit;
        match self {
            Period::Day => Unit::Day,
            Period::Week => Unit::Week,
            Period::Month => Unit::Month,
            Period::Quarter => Unit::Quarter,
            Period::Year => Unit::Year,
        }
    }
}

/// A time zone from the compiled-in database, interned: each name is looked up once per
/// process and lives as long as it (there are a few hundred names at most).
pub struct Zone {
    pub name: String,
    tz: TimeZone,
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The zone of an IANA name (`Europe/Berlin`, `UTC`), or `None` when the database has no such
/// zone.
pub fn zone(name: &str) -> Option<&'static Zone> {
    static ZONES: OnceLock<Mutex<HashMap<String, &'static Zone>>> = OnceLock::new();
    let zones = ZONES.get_or_init(Default::default);
    let mut zones = zones.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(z) = zones.get(name) {
        return Some(z);
    }
    let tz = jiff::tz::db().get(name).ok()?;
    let z: &'static Zone = Box::leak(Box::new(Zone {
        name: name.to_string(),
        tz,
    }));
    zones.insert(name.to_string(), z);
    Some(z)
}

/// The accepted `week_starts:` names, for error messages.
pub const WEEKDAY_NAMES: &str = "monday, tuesday, wednesday, thursday, friday, saturday or sunday";

/// A weekday by its English name, any case.
pub fn weekday(s: &str) -> Option<Weekday> {
    Some(match s.to_ascii_lowercase().as_str() {
        "monday" => Weekday::Monday,
        "tuesday" => Weekday::Tuesday,
        "wednesday" => Weekday::Wednesday,
        "thursday" => Weekday::Thursday,
        "friday" => Weekday::Friday,
        "saturday" => Weekday::Saturday,
        "sunday" => Weekday::Sunday,
        _ => return None,
    })
}

/// A calendar window: a period in a zone (weeks starting on `week_starts`).
#[derive(Clone, Copy)]
pub struct Calendar {
    pub period: Period,
    pub zone: &'static Zone,
    pub week_starts: Weekday,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.period == other.period
            && self.zone.name == other.zone.name
            && self.week_starts == other.week_starts
    }
}

impl Eq for Calendar {}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.key_part())
    }
}

impl Calendar {
    /// What tells this calendar apart in a counter key: `month@America/New_York`, and for weeks
    /// their first day, ISO numbered (`week1@UTC`: Monday).
    pub fn key_part(&self) -> String {
        match self.period {
            Period::Week => format!(
                "week{}@{}",
                self.week_starts.to_monday_one_offset(),
                self.zone.name
            ),
            p => format!("{}@{}", p.name(), self.zone.name),
        }
    }

    /// The first day of a week, as `week_starts:` names it.
    pub fn week_starts_name(&self) -> &'static str {
        match self.week_starts {
            Weekday::Monday => "monday",
            Weekday::Tuesday => "tuesday",
            Weekday::Wednesday => "wednesday",
            Weekday::Thursday => "thursday",
            Weekday::Friday => "friday",
            Weekday::Saturday => "saturday",
            Weekday::Sunday => "sunday",
        }
    }

    /// The first day of the period holding `date`.
    fn first_day(&self, date: Date) -> Date {
        match self.period {
            Period::Day => date,
            Period::Week => {
                let back = date.weekday().since(self.week_starts);
                date.checked_sub(i64::from(back).days()).unwrap_or(date)
            }
            Period::Month => date.first_of_month(),
            Period::Quarter => {
                let month = (date.month() - 1) / 3 * 3 + 1;
                Date::new(date.year(), month, 1).unwrap_or(date)
            }
            Period::Year => date.first_of_year(),
        }
    }

    /// The first day of the period after the one starting on `first`.
    fn next_first_day(&self, first: Date) -> Date {
        let span = match self.period {
            Period::Day => 1.day(),
            Period::Week => 1.week(),
            Period::Month => 1.month(),
            Period::Quarter => 3.months(),
            Period::Year => 1.year(),
        };
        first.checked_add(span).unwrap_or(first)
    }

    /// The instant (µs) a day starts in the zone: its midnight, or where a DST gap skips
    /// midnight, the first instant after the gap.
    fn start_us(&self, day: Date) -> u64 {
        day.to_zoned(self.zone.tz.clone())
            .map_or(0, |z| z.timestamp().as_microsecond().max(0) as u64)
    }

    /// The first day of the period holding `now_us`.
    fn period_of(&self, now_us: u64) -> Date {
        let ts = Timestamp::from_microsecond(now_us.min(i64::MAX as u64) as i64)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        self.first_day(ts.to_zoned(self.zone.tz.clone()).date())
    }

    /// When the period holding `now_us` starts and ends (µs): `start <= now_us < end`.
    pub fn period(&self, now_us: u64) -> (u64, u64) {
        let first = self.period_of(now_us);
        (
            self.start_us(first),
            self.start_us(self.next_first_day(first)),
        )
    }

    /// When the period holding `now_us` ends (µs).
    pub fn end_of(&self, now_us: u64) -> u64 {
        self.period(now_us).1
    }

    /// Two consecutive period ends around `now_us` for a clock that may differ a little from
    /// it (Redis's): in the first half of the period, the period's start (the previous
    /// period's end) and its end; in the second half, its end and the next period's end. A
    /// clock at `t` picks the first of them after `t`; any clock less than half a period away
    /// (12 hours for a day) finds its period among them.
    pub fn choices(&self, now_us: u64) -> (u64, u64) {
        let (start, end) = self.period(now_us);
        if now_us - start < (end - start) / 2 {
            (start, end)
        } else {
            (end, self.end_of(end))
        }
    }
}

/// Periods are numbered from the one holding 1900-01-01 (a global limit's authority windows,
/// docs/multi-region.md): consecutive periods have consecutive numbers, whatever their length.
const BASE_YEAR: i16 = 1900;

impl Calendar {
    /// The number of the period holding `now_us` (see [`BASE_YEAR`]).
    pub fn index(&self, now_us: u64) -> u64 {
        let first = self.period_of(now_us);
        let months = |d: Date| (i64::from(d.year() - BASE_YEAR)) * 12 + i64::from(d.month() - 1);
        let n = match self.period {
            Period::Day => days_since_base(first),
            Period::Week => days_since_base(first).div_euclid(7),
            Period::Month => months(first),
            Period::Quarter => months(first).div_euclid(3),
            Period::Year => i64::from(first.year() - BASE_YEAR),
        };
        n.max(0) as u64
    }

    /// When the period numbered `index` starts (µs): `index(start_of(i)) == i`.
    pub fn start_of(&self, index: u64) -> u64 {
        let i = index.min(400_000) as i64;
        let base = Date::new(BASE_YEAR, 1, 1).unwrap_or_default();
        let month =
            |m: i64| Date::new(BASE_YEAR + (m / 12) as i16, (m % 12 + 1) as i8, 1).unwrap_or(base);
        let first = match self.period {
            Period::Day => base.checked_add(i.days()).unwrap_or(base),
            // Any day of the week numbered i finds its first day: the 7th of its seven.
            Period::Week => {
                let last = base.checked_add((7 * i + 6).days()).unwrap_or(base);
                let first = self.first_day(last);
                if days_since_base(first).div_euclid(7) == i {
                    first
                } else {
                    first.checked_add(1.week()).unwrap_or(first)
                }
            }
            Period::Month => month(i),
            Period::Quarter => month(3 * i),
            Period::Year => month(12 * i),
        };
        self.start_us(first)
    }

    /// Parses [`Calendar::key_part`] back (`month@America/New_York`, `week1@UTC`).
    pub fn from_key_part(s: &str) -> Option<Calendar> {
        let (period, zone_name) = s.split_once('@')?;
        let (period, week_starts) = match period.strip_prefix("week") {
            Some(n) => (
                Period::Week,
                Weekday::from_monday_one_offset(n.parse().ok()?).ok()?,
            ),
            None => (Period::parse(period)?, Weekday::Monday),
        };
        Some(Calendar {
            period,
            zone: zone(zone_name)?,
            week_starts,
        })
    }
}

/// Days from 1900-01-01 to `d` (weeks, numbered by their first day, keep a fixed phase).
fn days_since_base(d: Date) -> i64 {
    let base = Date::new(BASE_YEAR, 1, 1).unwrap_or_default();
    d.since(base).map_or(0, |s| i64::from(s.get_days()))
}

impl serde::Serialize for Calendar {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.key_part())
    }
}

impl<'de> serde::Deserialize<'de> for Calendar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Calendar, D::Error> {
        let s = String::deserialize(d)?;
        Calendar::from_key_part(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("not a calendar: {s}")))
    }
}

/// The end of the period holding `now` among the two `choices` gave: what the Redis script
/// computes (`fixed_fresh`), written in Rust for the tests that hold the two to each other.
pub fn pick(choices: (u64, u64), now: u64) -> Option<u64> {
    if now < choices.0 {
        Some(choices.0)
    } else if now < choices.1 {
        Some(choices.1)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> u64 {
        let ts: Timestamp = s.parse().expect("timestamp");
        ts.as_microsecond() as u64
    }

    fn cal(period: Period, zone_name: &str) -> Calendar {
        Calendar {
            period,
            zone: zone(zone_name).expect("zone"),
            week_starts: Weekday::Monday,
        }
    }

    #[test]
    fn periods_are_numbered_consecutively_and_found_again() {
        let zones = [
            "UTC",
            "America/New_York",
            "Europe/Berlin",
            "Pacific/Kiritimati",
        ];
        for period in [
            Period::Day,
            Period::Week,
            Period::Month,
            Period::Quarter,
            Period::Year,
        ] {
            for z in zones {
                let mut c = cal(period, z);
                if period == Period::Week {
                    c.week_starts = Weekday::Sunday;
                }
                let mut t = at("2027-03-20T12:00:00Z");
                let first = c.index(t);
                for n in 0..30u64 {
                    let (start, end) = c.period(t);
                    assert_eq!(c.index(t), first + n, "{period:?} {z}");
                    assert_eq!(c.start_of(first + n), start, "{period:?} {z} {n}");
                    assert_eq!(c.start_of(first + n + 1), end, "{period:?} {z} {n}");
                    assert_eq!(c.index(end - 1), first + n);
                    t = end;
                }
                let back = Calendar::from_key_part(&c.key_part()).expect("parses");
                assert_eq!(back, c);
                let json = serde_json::to_string(&c).expect("json");
                assert_eq!(serde_json::from_str::<Calendar>(&json).expect("back"), c);
            }
        }
    }

    #[test]
    fn a_month_in_new_york_ends_at_its_last_second_local() {
        let c = cal(Period::Month, "America/New_York");
        // 31 January 23:59:59 EST is 1 February 04:59:59 UTC.
        let (start, end) = c.period(at("2027-02-01T04:59:59Z"));
        assert_eq!(start, at("2027-01-01T05:00:00Z"));
        assert_eq!(end, at("2027-02-01T05:00:00Z"));
        assert_eq!(
            c.end_of(at("2027-02-01T05:00:00Z")),
            at("2027-03-01T05:00:00Z")
        );
    }

    #[test]
    fn a_berlin_day_across_dst_is_23_or_25_hours() {
        let c = cal(Period::Day, "Europe/Berlin");
        let (s, e) = c.period(at("2027-03-28T10:00:00Z"));
        assert_eq!(e - s, 23 * 3_600_000_000);
        let (s, e) = c.period(at("2027-10-31T10:00:00Z"));
        assert_eq!(e - s, 25 * 3_600_000_000);
    }

    #[test]
    fn leap_day_and_kiritimati_new_year() {
        let c = cal(Period::Day, "UTC");
        assert_eq!(
            c.period(at("2028-02-29T12:00:00Z")),
            (at("2028-02-29T00:00:00Z"), at("2028-03-01T00:00:00Z"))
        );
        let m = cal(Period::Month, "UTC");
        assert_eq!(
            m.end_of(at("2028-02-10T00:00:00Z")),
            at("2028-03-01T00:00:00Z")
        );
        // UTC+14: the year starts on 31 December at 10:00 UTC.
        let y = cal(Period::Year, "Pacific/Kiritimati");
        assert_eq!(
            y.end_of(at("2027-12-31T09:59:59Z")),
            at("2027-12-31T10:00:00Z")
        );
        assert_eq!(
            y.period(at("2027-12-31T10:00:00Z")).0,
            at("2027-12-31T10:00:00Z")
        );
    }

    #[test]
    fn weeks_start_on_monday_unless_told() {
        // 2027-01-07 is a Thursday.
        let mut c = cal(Period::Week, "UTC");
        assert_eq!(
            c.period(at("2027-01-07T12:00:00Z")).0,
            at("2027-01-04T00:00:00Z")
        );
        c.week_starts = Weekday::Sunday;
        assert_eq!(
            c.period(at("2027-01-07T12:00:00Z")).0,
            at("2027-01-03T00:00:00Z")
        );
        let q = cal(Period::Quarter, "UTC");
        assert_eq!(
            q.period(at("2027-05-17T00:00:00Z")),
            (at("2027-04-01T00:00:00Z"), at("2027-07-01T00:00:00Z"))
        );
    }

    #[test]
    fn choices_hold_the_period_for_a_clock_up_to_half_a_period_away() {
        let c = cal(Period::Day, "Europe/Berlin");
        for now in [at("2027-03-28T00:30:00Z"), at("2027-03-28T20:00:00Z")] {
            let ch = c.choices(now);
            for skew in [-11 * 3600, -60, 0, 60, 11 * 3600] {
                let t = (now as i64 + skew * 1_000_000) as u64;
                assert_eq!(pick(ch, t), Some(c.end_of(t)), "now {now} skew {skew}");
            }
        }
    }
}
