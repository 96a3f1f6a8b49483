//! The YAML file format, exactly as written by users: envoyproxy/ratelimit's keys plus
//! tollgate's extensions. Unknown keys are rejected here (serde reports them with a line).
//! Validation and compilation happen in [`super::compile`].

use serde::de::{Error, Visitor};
use serde::{Deserialize, Deserializer};

use crate::base::duration;
use crate::config::error::LimitError;
use crate::config::global::{check_global, RawGlobal};
use crate::config::pool::{check_fair_share, check_shares, Pool, RawFairShare, RawShares};
use crate::limit::unit::Unit;
use crate::limit::Algorithm;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    /// envoyproxy/ratelimit accepts `name` at any level and reads it only in a `rate_limit`
    /// (Envoy Gateway's config dumps carry one at the root, the xDS resource's name): read
    /// and ignored.
    #[serde(default, rename = "name")]
    pub _name: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "scalar")]
    pub domain: Option<String>,
    #[serde(default)]
    pub descriptors: Option<Vec<RawRule>>,
    /// tollgate: every request of the domain is answered OK without touching the store.
    #[serde(default)]
    pub disabled: bool,
    /// tollgate: `false` ignores the limit overrides callers put in descriptors.
    #[serde(default)]
    pub allow_overrides: Option<bool>,
    /// tollgate: the largest cost one descriptor of this domain may carry.
    #[serde(default)]
    pub max_hits: Option<u64>,
    /// tollgate: how reservations of this domain are charged.
    #[serde(default)]
    pub reservations: Option<RawReservations>,
    /// tollgate: the price table that `spend:` limits charge by (`limit::money`).
    #[serde(default)]
    pub prices: Option<RawPrices>,
}

/// `prices:` (see `limit::money`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrices {
    /// The currency's name, shown with spend (default `USD`).
    #[serde(default, deserialize_with = "scalar")]
    pub currency: Option<String>,
    /// The entry naming the model (default `model`).
    #[serde(default, deserialize_with = "scalar")]
    pub model_key: Option<String>,
    /// The entry naming the token kind (default `kind`).
    #[serde(default, deserialize_with = "scalar")]
    pub kind_key: Option<String>,
    /// Per model, per token kind: what a million tokens cost.
    #[serde(default)]
    pub per_million_tokens:
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, Amount>>,
    /// The prices of a model the table does not name (absent: such a request is refused).
    #[serde(default)]
    pub default: Option<std::collections::BTreeMap<String, Amount>>,
}

/// An amount of money as written: a decimal with at most 6 places, in micro-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount(pub u64);

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Amount;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an amount: a decimal number with at most 6 places")
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<Amount, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<Amount, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: Error>(self, v: f64) -> Result<Amount, E> {
                // Display writes the shortest decimal that reads back as `v`: what was written.
                self.visit_str(&v.to_string())
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<Amount, E> {
                crate::limit::money::parse_micros(v).map(Amount).ok_or_else(|| {
                    E::custom(format!(
                        "invalid amount '{v}': expected a decimal number with at most 6 places (e.g. 0.15)"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `reservations:` (see `service::reserve`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReservations {
    /// The estimate a reservation without one is charged; absent: such a reservation is
    /// refused.
    #[serde(default)]
    pub default_estimate: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// Accepted and ignored, as envoyproxy/ratelimit does (see [`RawFile::name`]).
    #[serde(default, rename = "name")]
    pub _name: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "scalar")]
    pub key: Option<String>,
    #[serde(default, deserialize_with = "scalar")]
    pub value: Option<String>,
    #[serde(default)]
    pub rate_limit: Option<CheckedLimit>,
    #[serde(default)]
    pub rate_limits: Option<Vec<CheckedLimit>>,
    #[serde(default)]
    pub descriptors: Option<Vec<RawRule>>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub quota_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    #[serde(default)]
    pub value_to_metric: bool,
    #[serde(default)]
    pub share_threshold: bool,
    #[serde(default)]
    pub hierarchical: bool,
    #[serde(default)]
    pub metadata: Option<serde_yaml::Mapping>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    #[serde(default)]
    pub requests_per_unit: Option<u32>,
    #[serde(default, deserialize_with = "unit")]
    pub unit: Option<String>,
    #[serde(default)]
    pub unlimited: bool,
    #[serde(default, deserialize_with = "scalar")]
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Option<Vec<RawReplace>>,
    #[serde(default, deserialize_with = "algorithm")]
    pub algorithm: Option<String>,
    #[serde(default, deserialize_with = "window")]
    pub window: Option<String>,
    #[serde(default)]
    pub burst: Option<u64>,
    #[serde(default)]
    pub shared: bool,
    #[serde(default)]
    pub overdraft: bool,
    /// tollgate: on a `shared` limit, each instance takes this many units at a time from Redis.
    #[serde(default)]
    pub lease: Option<u64>,
    /// tollgate: a `fixed_window` limit whose window is this calendar period.
    #[serde(default, deserialize_with = "calendar")]
    pub calendar: Option<String>,
    /// tollgate: the IANA time zone of `calendar` (default UTC).
    #[serde(default, deserialize_with = "timezone")]
    pub timezone: Option<String>,
    /// tollgate: the first day of a `calendar: week` (default monday, as ISO 8601).
    #[serde(default, deserialize_with = "week_starts")]
    pub week_starts: Option<String>,
    /// tollgate: how long a `concurrency` slot is held unless released or renewed (default 5m).
    #[serde(default, deserialize_with = "lease_ttl")]
    pub lease_ttl: Option<String>,
    /// tollgate: a money budget (the domain's `prices:` turn tokens into money), instead of
    /// `requests_per_unit`.
    #[serde(default)]
    pub spend: Option<Amount>,
    /// tollgate: on a `token_bucket`, a request that would fit within this long is admitted
    /// now and its answer held until it fits, instead of refused (`1ms` to `60s`).
    #[serde(default, deserialize_with = "max_wait")]
    pub max_wait: Option<String>,
    /// tollgate: on a shared fixed window, guaranteed shares of the pool by class.
    #[serde(default)]
    pub shares: Option<RawShares>,
    /// tollgate: on a shared fixed window, a fair share among the pool's active tenants.
    #[serde(default)]
    pub fair_share: Option<RawFairShare>,
    /// tollgate: one limit across regions (docs/multi-region.md).
    #[serde(default)]
    pub global: Option<RawGlobal>,
}

/// A limit read from a file, its fields checked against each other as it was read (calendar
/// and concurrency keys), so that an error names its line.
#[derive(Debug, Default)]
pub struct CheckedLimit(pub RawLimit);

impl<'de> Deserialize<'de> for CheckedLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawLimit::deserialize(d)?;
        check_fields(&raw).map_err(serde::de::Error::custom)?;
        Ok(CheckedLimit(raw))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplace {
    #[serde(default, deserialize_with = "scalar")]
    pub name: Option<String>,
}

/// Accepts any YAML scalar as a string, spelled as written: envoyproxy/ratelimit's Go parser
/// gives a string field a scalar's text, so `value: 200` is "200", and `+44`, `True`, `0x1F`
/// and `1.10` stay what they say (a YAML number or bool read back would be "44", "true", "31"
/// and "1.1", which Envoy never sends). A plain `null`, `~` or nothing is no value.
fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, Ok)
}

/// An optional scalar's text, checked by `check`.
fn as_written<'de, D: Deserializer<'de>>(
    d: D,
    check: impl FnOnce(String) -> Result<String, LimitError>,
) -> Result<Option<String>, D::Error> {
    d.deserialize_option(Optional(Scalar(check)))
}

/// A limit's `unit`, checked here so that an error names its line.
fn unit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| match Unit::parse(&s) {
        Some(_) => Ok(s),
        None => Err(LimitError::Unit(s)),
    })
}

/// A limit's `algorithm`, checked here so that an error names its line.
fn algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| match Algorithm::parse(&s) {
        Some(_) => Ok(s),
        None => Err(LimitError::Algorithm(s)),
    })
}

/// A limit's `window`, checked here so that an error names its line.
fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| window_us(&s).map(|_| s))
}

/// A limit's `calendar`, checked here so that an error names its line.
fn calendar<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| {
        match crate::limit::calendar::Period::parse(&s) {
            Some(_) => Ok(s),
            None => Err(LimitError::Calendar(s)),
        }
    })
}

/// A limit's `timezone`, checked here so that an error names its line.
fn timezone<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| match crate::limit::calendar::zone(&s) {
        Some(_) => Ok(s),
        None => Err(LimitError::TimeZone(s)),
    })
}

/// A limit's `week_starts`, checked here so that an error names its line.
fn week_starts<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| match crate::limit::calendar::weekday(&s) {
        Some(_) => Ok(s),
        None => Err(LimitError::WeekStarts(s)),
    })
}

/// A limit's `max_wait`, checked here so that an error names its line.
fn max_wait<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| max_wait_us(&s).map(|_| s))
}

/// The longest `max_wait`: a minute. A held answer holds a connection's stream and a permit
/// (`--max-held`); a caller waiting longer than this is better told to come back.
pub const MAX_WAIT_US: u64 = 60_000_000;

/// `max_wait`: whole milliseconds from 1 ms to a minute, in microseconds.
pub(super) fn max_wait_us(text: &str) -> Result<u64, LimitError> {
    match duration::parse(text) {
        Ok(d)
            if !d.is_zero()
                && d.as_micros() <= u128::from(MAX_WAIT_US)
                && d.subsec_nanos() % 1_000_000 == 0 =>
        {
            Ok(d.as_micros() as u64)
        }
        _ => Err(LimitError::MaxWait(text.to_string())),
    }
}

/// A limit's `lease_ttl`, checked here so that an error names its line.
fn lease_ttl<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    as_written(d, |s: String| slot_hold_us(&s).map(|_| s))
}

/// A scalar that may be absent (a plain null); present, it is read by the inner visitor.
struct Optional<V>(V);

impl<'de, F: FnOnce(String) -> Result<String, LimitError>> Visitor<'de> for Optional<Scalar<F>> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self.0)
    }
}

/// Reads one YAML scalar as its text and checks it with the function. Errors are raised
/// while the scalar is being read, so the YAML parser gives them that scalar's line.
struct Scalar<F>(F);

impl<'de, F: FnOnce(String) -> Result<String, LimitError>> Visitor<'de> for Scalar<F> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
        (self.0)(v.to_string()).map(Some).map_err(E::custom)
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Self::Value, E> {
        (self.0)(v).map(Some).map_err(E::custom)
    }
}

/// How long a concurrency slot is held (its hold) unless `lease_ttl` says otherwise: five
/// minutes.
pub const DEFAULT_SLOT_HOLD_US: u64 = 300 * 1_000_000;

/// The longest `lease_ttl`: a day.
const MAX_SLOT_HOLD_US: u64 = 86_400 * 1_000_000;

/// The most slots a concurrency limit may hold (each is an entry its counter reads).
pub const MAX_CONCURRENCY: u32 = 10_000;

/// `lease_ttl`: whole seconds from 1 s to a day, in microseconds.
pub(super) fn slot_hold_us(text: &str) -> Result<u64, LimitError> {
    match duration::parse(text) {
        Ok(d)
            if d.subsec_nanos() == 0
                && d.as_secs() >= 1
                && d.as_micros() <= u128::from(MAX_SLOT_HOLD_US) =>
        {
            Ok(d.as_micros() as u64)
        }
        _ => Err(LimitError::SlotHold(text.to_string())),
    }
}

/// The checks of one limit's fields against each other that need nothing else (calendar and
/// concurrency keys): run as a file is read, so an error names its line.
pub(super) fn check_fields(rl: &RawLimit) -> Result<(), LimitError> {
    let algorithm = match rl.algorithm.as_deref() {
        None => Algorithm::FixedWindow,
        Some(a) => Algorithm::parse(a).ok_or_else(|| LimitError::Algorithm(a.to_string()))?,
    };
    if let Some(c) = compile_calendar(rl, algorithm)? {
        calendar_unit(rl, c)?;
    }
    if algorithm == Algorithm::Concurrency && rl.calendar.is_none() {
        check_concurrency(rl, rl.requests_per_unit.unwrap_or(0))?;
    }
    if rl.lease_ttl.is_some() && algorithm != Algorithm::Concurrency {
        return Err(LimitError::SlotHoldWithoutConcurrency);
    }
    if rl.max_wait.is_some() {
        if algorithm != Algorithm::TokenBucket {
            return Err(LimitError::MaxWaitAlgorithm(algorithm.name()));
        }
        if rl.lease.is_some() {
            return Err(LimitError::MaxWaitWithLease);
        }
        if rl.overdraft {
            return Err(LimitError::MaxWaitWithOverdraft);
        }
    }
    let pool = Pool {
        shared: rl.shared,
        algorithm,
        lease: rl.lease.is_some(),
        overdraft: rl.overdraft,
    };
    if let Some(shares) = &rl.shares {
        check_shares(pool, shares)?;
    }
    if let Some(fair) = &rl.fair_share {
        if rl.shares.is_some() {
            return Err(LimitError::FairShareWith("shares"));
        }
        check_fair_share(pool, fair)?;
    }
    if let Some(g) = &rl.global {
        let with = [
            (
                !rl.shared,
                "shared: false (a global limit is one counter: shared: true)",
            ),
            (rl.lease.is_some(), "lease"),
            (rl.overdraft, "overdraft"),
            (rl.shares.is_some(), "shares"),
            (rl.fair_share.is_some(), "fair_share"),
        ];
        check_global(g, algorithm, &with)?;
    }
    if let Some(spend) = rl.spend {
        if rl.requests_per_unit.is_some() {
            return Err(LimitError::SpendWithRequests);
        }
        if algorithm == Algorithm::Concurrency {
            return Err(LimitError::SpendWith("algorithm concurrency"));
        }
        if rl.burst.is_some() {
            return Err(LimitError::SpendWith(
                "burst (a spend bucket holds its spend)",
            ));
        }
        if spend.0 > crate::limit::money::MAX_SPEND {
            return Err(LimitError::SpendTooLarge(spend.0));
        }
    }
    Ok(())
}

/// A calendar limit's unit: its period's; a `unit` written beside it must agree.
pub(super) fn calendar_unit(
    rl: &RawLimit,
    c: crate::limit::calendar::Calendar,
) -> Result<Unit, LimitError> {
    let unit = c.period.unit();
    match rl.unit.as_deref().filter(|u| !u.is_empty()) {
        Some(u) if Unit::parse(u) != Some(unit) => Err(LimitError::CalendarUnit {
            unit: u.to_string(),
            calendar: c.period.name().to_string(),
        }),
        _ => Ok(unit),
    }
}

/// `calendar:` (with `timezone:` and `week_starts:`): only on a fixed window without `window:`
/// or `lease`.
pub(super) fn compile_calendar(
    rl: &RawLimit,
    algorithm: Algorithm,
) -> Result<Option<crate::limit::calendar::Calendar>, LimitError> {
    use crate::limit::calendar::{weekday, zone, Calendar, Period};
    let Some(period) = rl.calendar.as_deref() else {
        if rl.timezone.is_some() {
            return Err(LimitError::CalendarOnly("timezone"));
        }
        if rl.week_starts.is_some() {
            return Err(LimitError::CalendarOnly("week_starts"));
        }
        return Ok(None);
    };
    let period = Period::parse(period).ok_or_else(|| LimitError::Calendar(period.to_string()))?;
    if algorithm != Algorithm::FixedWindow {
        return Err(LimitError::CalendarAlgorithm(algorithm.name()));
    }
    if rl.window.is_some() {
        return Err(LimitError::CalendarWithWindow);
    }
    if rl.lease.is_some() {
        return Err(LimitError::CalendarWithLease);
    }
    if rl.week_starts.is_some() && period != Period::Week {
        return Err(LimitError::WeekStartsWithoutWeek);
    }
    let zone_name = rl.timezone.as_deref().unwrap_or("UTC");
    let zone = zone(zone_name).ok_or_else(|| LimitError::TimeZone(zone_name.to_string()))?;
    let week_starts = match rl.week_starts.as_deref() {
        None => jiff::civil::Weekday::Monday,
        Some(w) => weekday(w).ok_or_else(|| LimitError::WeekStarts(w.to_string()))?,
    };
    Ok(Some(Calendar {
        period,
        zone,
        week_starts,
    }))
}

/// `algorithm: concurrency`: a cap of 1 to [`MAX_CONCURRENCY`] slots, no unit, window, burst,
/// overdraft, lease or shadow of a window.
pub(super) fn check_concurrency(rl: &RawLimit, cap: u32) -> Result<(), LimitError> {
    let other = [
        (
            rl.unit.as_deref().is_some_and(|u| !u.is_empty()),
            "unit (it caps slots held at once, in no unit of time)",
        ),
        (
            rl.window.is_some(),
            "window (lease_ttl says how long a slot is held)",
        ),
        (rl.burst.is_some(), "burst"),
        (rl.overdraft, "overdraft"),
        (rl.lease.is_some(), "lease"),
    ];
    if let Some((_, what)) = other.iter().find(|(set, _)| *set) {
        return Err(LimitError::Concurrency(what));
    }
    if cap == 0 || cap > MAX_CONCURRENCY {
        return Err(LimitError::ConcurrencyCap(cap));
    }
    Ok(())
}

/// The longest `window`: ten years. A window's end (now plus the window, in µs since the
/// epoch) must stay below 2^53 for the Redis script to hold it exactly; this keeps it far
/// below.
const MAX_WINDOW_US: u64 = 3650 * 86_400 * 1_000_000;

/// A limit's `window`: a positive whole number of milliseconds, in microseconds.
pub(super) fn window_us(text: &str) -> Result<u64, LimitError> {
    match duration::parse(text) {
        Ok(d) if d.as_micros() > u128::from(MAX_WINDOW_US) => {
            Err(LimitError::WindowTooLong(text.to_string()))
        }
        Ok(d) if !d.is_zero() && d.subsec_nanos() % 1_000_000 == 0 => Ok(d.as_micros() as u64),
        _ => Err(LimitError::Window(text.to_string())),
    }
}
