//! The units a limit is expressed in, as config files name them and as Envoy's response
//! numbers them.

use std::fmt;

/// The unit a limit is expressed in, as the response reports it.
/// Durations follow envoyproxy/ratelimit: month = 30 days, year = 365 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
    /// Only a calendar window's (`calendar: quarter`): Envoy's unit enum has no quarter, so it
    /// is reported as `UNKNOWN`.
    Quarter,
    /// Only a concurrency limit's: slots held at once, per no unit of time (`UNKNOWN`).
    InFlight,
}

/// The one table of units: config name, response enum name, length, proto number
/// (`RateLimitResponse.RateLimit.Unit` and `envoy.type.v3.RateLimitUnit` share numbering).
const UNITS: [(Unit, &str, &str, u64, i32); 9] = [
    (Unit::Second, "second", "SECOND", 1, 1),
    (Unit::Minute, "minute", "MINUTE", 60, 2),
    (Unit::Hour, "hour", "HOUR", 3_600, 3),
    (Unit::Day, "day", "DAY", 86_400, 4),
    (Unit::Week, "week", "WEEK", 7 * 86_400, 7),
    (Unit::Month, "month", "MONTH", 30 * 86_400, 5),
    (Unit::Year, "year", "YEAR", 365 * 86_400, 6),
    (Unit::Quarter, "quarter", "UNKNOWN", 91 * 86_400, 0),
    (Unit::InFlight, "in_flight", "UNKNOWN", 0, 0),
];

/// The accepted config names, for error messages.
pub const UNIT_NAMES: &str = "second, minute, hour, day, week, month or year";

impl Unit {
    fn row(self) -> &'static (Unit, &'static str, &'static str, u64, i32) {
        // Every variant has a row.
        UNITS.iter().find(|r| r.0 == self).unwrap_or(&UNITS[0])
    }

    /// Parses a config name (`minute`, any case) or a response enum name (`MINUTE`); a quarter
    /// is only a calendar's (see [`super::calendar::Period`]), in flight a concurrency limit's.
    pub fn parse(s: &str) -> Option<Unit> {
        UNITS
            .iter()
            .find(|r| r.1.eq_ignore_ascii_case(s) && r.4 != 0)
            .map(|r| r.0)
    }

    pub fn seconds(self) -> u64 {
        self.row().3
    }

    /// The proto enum number.
    pub fn proto(self) -> i32 {
        self.row().4
    }

    pub fn from_proto(n: i32) -> Option<Unit> {
        UNITS.iter().find(|r| r.4 == n && n != 0).map(|r| r.0)
    }

    /// The config name, `minute`.
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// The proto enum name, `MINUTE`.
    pub fn proto_name(self) -> &'static str {
        self.row().2
    }
}

/// The proto enum name of a unit number; `UNKNOWN` for 0 and anything unknown.
pub fn proto_unit_name(n: i32) -> &'static str {
    Unit::from_proto(n).map_or("UNKNOWN", Unit::proto_name)
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_round_trip_through_proto() {
        for u in [
            Unit::Second,
            Unit::Minute,
            Unit::Hour,
            Unit::Day,
            Unit::Week,
            Unit::Month,
            Unit::Year,
        ] {
            assert_eq!(Unit::from_proto(u.proto()), Some(u));
            assert_eq!(Unit::parse(u.name()), Some(u));
        }
        assert_eq!(Unit::from_proto(0), None);
    }
}
