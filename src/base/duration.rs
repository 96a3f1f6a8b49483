//! The one duration syntax of tollgate, for flags, environment variables and config windows.
//!
//! A duration is one or more `<number><unit>` parts, as Go's `time.ParseDuration` writes them
//! (`1h30m`, `1.5s`, `500ms`, `250us`), plus `d` (day) and `w` (week) which config windows use.
//! Units: `ns`, `us` / `µs`, `ms`, `s`, `m`, `h`, `d`, `w`. A bare `0` is zero. Negative
//! durations are rejected. Parts add up; the result is exact to the nanosecond and must fit
//! in a `u64` of nanoseconds (about 584 years).

use std::time::Duration;

/// Nanoseconds per unit, longest unit names first so `ms` is not read as `m` + `s`.
const UNITS: [(&str, u128); 10] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
    ("w", 604_800_000_000_000),
    // Go also accepts U+03BC (Greek mu) for micro.
    ("μs", 1_000),
];

/// What a duration looks like, for error messages.
pub const EXAMPLES: &str = "a duration like 500ms, 10s, 5m, 1h30m or 1d";

/// A duration that could not be read; it names the text and the expected form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("'{0}' is not {EXAMPLES}")]
    Malformed(String),
    #[error("'{0}' must be longer than zero")]
    Zero(String),
}

/// Parses a duration (see the module docs).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    let bad = || DurationError::Malformed(text.to_string());
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut rest = s;
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, after) = rest.split_at(num_len);
        let (unit, per) = UNITS
            .iter()
            .filter(|(u, _)| after.starts_with(u))
            .max_by_key(|(u, _)| u.len())
            .ok_or_else(bad)?;
        total_ns = total_ns
            .checked_add(scaled(num, *per).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        rest = &after[unit.len()..];
    }
    let ns = u64::try_from(total_ns).map_err(|_| bad())?;
    Ok(Duration::from_nanos(ns))
}

/// Parses a duration that must be positive (a window, a timeout).
pub fn parse_positive(text: &str) -> Result<Duration, DurationError> {
    match parse(text)? {
        d if d.is_zero() => Err(DurationError::Zero(text.to_string())),
        d => Ok(d),
    }
}

/// `off` (or `0`) for "disabled", else a positive duration.
pub fn parse_optional(text: &str) -> Result<Option<Duration>, DurationError> {
    match text.trim() {
        "off" => Ok(None),
        _ => parse(text).map(|d| (!d.is_zero()).then_some(d)),
    }
}

/// `number × per` for a decimal number like `1.5` or `.5`, exact in integers.
fn scaled(num: &str, per: u128) -> Option<u128> {
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut value = whole.checked_mul(per)?;
    let mut scale = per;
    for digit in frac.chars() {
        scale /= 10;
        value = value.checked_add(u128::from(digit.to_digit(10)?) * scale)?;
    }
    Some(value)
}

/// Formats a duration in the shortest exact form this parser reads back (`90s`, `1500ms`).
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, per) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if ns > 0 && ns.is_multiple_of(per) {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn reads_go_syntax_and_tollgate_units() {
        for (text, want) in [
            ("90s", ms(90_000)),
            ("5m", ms(300_000)),
            ("1h", ms(3_600_000)),
            ("250ms", ms(250)),
            ("1h30m", ms(5_400_000)),
            ("1.5s", ms(1_500)),
            (".5s", ms(500)),
            ("2d", ms(172_800_000)),
            ("1w", ms(604_800_000)),
            ("1m30s500ms", ms(90_500)),
            ("300us", Duration::from_micros(300)),
            ("300µs", Duration::from_micros(300)),
            ("7ns", Duration::from_nanos(7)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            (" 10s ", ms(10_000)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for text in [
            "",
            "5",
            "m",
            "s5",
            "5 parsecs",
            "-1s",
            "1.2.3s",
            "1x",
            "10s5",
            "1e3s",
            "99999999999h",
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.to_string().contains(EXAMPLES), "{text}: {err}");
        }
        assert!(parse_positive("0s").is_err());
        assert_eq!(parse_optional("off"), Ok(None));
        assert_eq!(parse_optional("0"), Ok(None));
        assert_eq!(parse_optional("5s"), Ok(Some(ms(5_000))));
    }

    #[test]
    fn formats_what_it_parses() {
        for d in [
            ms(90_000),
            ms(1_500),
            ms(3_600_000),
            Duration::from_micros(7),
        ] {
            assert_eq!(parse(&format(d)), Ok(d));
        }
        assert_eq!(format(ms(5_400_000)), "90m");
    }
}
