//! What can be wrong with a config, as types: [`ConfigError`] names the file (and the line,
//! when the YAML parser knows it) and holds a [`ConfigProblem`]; a rule's problems are
//! [`RuleError`]s, a limit's [`LimitError`]s. Error wording follows envoyproxy/ratelimit where
//! it has one; a rule's problem names its composite key (`domain.key_value.key2`).

use std::sync::Arc;
use std::time::Duration;

use crate::limit::calendar::{PERIOD_NAMES, WEEKDAY_NAMES};
use crate::limit::unit::UNIT_NAMES;
use crate::limit::ALGORITHM_NAMES;

/// A config problem a user can act on: which file, where, what.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{file}{}: {problem}", .line.map(|l| format!(": line {l}")).unwrap_or_default())]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    /// What is wrong. Its text ends this error's message, so it is not also this error's
    /// `source()`: anyhow's `{:#}` would print it (and a YAML error's own wording) twice.
    pub problem: ConfigProblem,
}

impl ConfigError {
    pub fn new(file: &str, line: Option<usize>, problem: impl Into<ConfigProblem>) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            line,
            problem: problem.into(),
        }
    }

    /// A file the YAML parser refused; serde_yaml's line goes into the error's line.
    pub(super) fn yaml(file: &str, e: serde_yaml::Error) -> ConfigError {
        let line = e.location().map(|l| l.line());
        ConfigError::new(file, line, ConfigProblem::Yaml(Arc::new(e)))
    }
}

/// What is wrong with a config file or directory.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigProblem {
    /// The config path itself.
    #[error("cannot read config: {0}")]
    Unreadable(#[source] Arc<std::io::Error>),
    /// The config directory's entries.
    #[error("cannot list: {0}")]
    Unlistable(#[source] Arc<std::io::Error>),
    /// One file of the config.
    #[error("cannot read: {0}")]
    UnreadableFile(#[source] Arc<std::io::Error>),
    /// Not YAML, or not the config's shape (an unknown key, a value of the wrong type, or a
    /// value a limit refuses where the parser can name its line).
    #[error("error loading config file: {}", yaml_message(.0))]
    Yaml(#[source] Arc<serde_yaml::Error>),
    #[error("config file cannot have empty domain")]
    EmptyDomain,
    /// `---` between domains: envoyproxy/ratelimit reads the first and drops the rest without
    /// a word; tollgate says so instead.
    #[error(
        "{0} YAML documents (`---`) in one file: a config file holds one domain, so put each in \
         a file of its own (envoyproxy/ratelimit would read only the first and drop the rest)"
    )]
    SeveralDocuments(usize),
    #[error("domain '{0}': max_hits must be at least 1 (it is the largest cost one descriptor may carry)")]
    ZeroMaxHits(String),
    #[error(
        "domain '{0}': reservations.default_estimate must be at least 1 (leave it out to refuse \
         reservations that carry no estimate)"
    )]
    ZeroDefaultEstimate(String),
    #[error("domain '{domain}': prices: {problem}")]
    Prices {
        domain: String,
        #[source]
        problem: PricesError,
    },
    #[error("duplicate domain '{0}' in config file")]
    DuplicateDomain(String),
    /// Merged files (`--merge-domains`) that disagree on the domain's own settings.
    #[error(
        "domain '{0}' is declared again with different disabled / allow_overrides / max_hits; \
         give them in one file, or the same in every file"
    )]
    PolicyMismatch(String),
    #[error(transparent)]
    Rule(#[from] RuleError),
}

/// serde_yaml's message in the config's words: without its " at line N column M" (the line is
/// reported separately), and with keys called keys.
fn yaml_message(e: &serde_yaml::Error) -> String {
    let text = e.to_string();
    let message = match text.find(" at line ") {
        Some(i) => &text[..i],
        None => &text,
    };
    message
        .replacen("unknown field `", "unknown key `", 1)
        .replacen("missing field `", "missing key `", 1)
}

/// A descriptor rule that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("'{parent}': descriptor has empty key")]
    EmptyKey { parent: String },
    #[error(
        "share_threshold can only be used with wildcard values (containing '*'), but found key '{0}'"
    )]
    ShareThresholdNeedsWildcard(String),
    #[error("'{full_key}': {problem}")]
    Limit {
        full_key: String,
        #[source]
        problem: LimitError,
    },
    #[error("'{0}': should not specify rate limit unit when unlimited")]
    UnlimitedWithUnit(String),
    #[error("'{0}': an unlimited rate limit cannot be combined with other limits")]
    UnlimitedWithOthers(String),
    #[error(
        "'{0}': lease: a rule with more than one shared limit cannot lease them (one script call decides them together); give the leased limit a rule of its own"
    )]
    LeaseWithSeveralShared(String),
    #[error("'{0}': metadata must be a map with string keys")]
    Metadata(String),
    #[error(transparent)]
    Duplicate(#[from] DuplicateKey),
}

impl RuleError {
    /// The composite key of the rule at fault (`None` for a rule without a key).
    pub fn full_key(&self) -> Option<&str> {
        match self {
            RuleError::EmptyKey { .. } => None,
            RuleError::ShareThresholdNeedsWildcard(k)
            | RuleError::Limit { full_key: k, .. }
            | RuleError::UnlimitedWithUnit(k)
            | RuleError::UnlimitedWithOthers(k)
            | RuleError::LeaseWithSeveralShared(k)
            | RuleError::Metadata(k)
            | RuleError::Duplicate(DuplicateKey(k)) => Some(k),
        }
    }
}

/// A rule whose composite key another rule of the same level already has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("duplicate descriptor composite key '{0}'")]
pub struct DuplicateKey(pub String);

/// A `rate_limit` entry that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("should not have an empty replaces entry")]
    EmptyReplaces,
    #[error("replaces should not contain name of same descriptor")]
    ReplacesItself,
    #[error("invalid rate limit unit '{0}'; expected {UNIT_NAMES}")]
    Unit(String),
    #[error("invalid algorithm '{0}'; expected {ALGORITHM_NAMES}")]
    Algorithm(String),
    #[error("invalid window '{0}': the longest window is 3650d (ten years)")]
    WindowTooLong(String),
    #[error(
        "invalid window '{0}': expected a positive whole number of milliseconds, like 500ms, 90s, 5m, 1h30m or 1d"
    )]
    Window(String),
    #[error("burst must be at least 1")]
    ZeroBurst,
    #[error("burst is only valid with algorithm token_bucket")]
    BurstWithoutTokenBucket,
    #[error("a token_bucket limit needs requests_per_unit of at least 1")]
    TokenBucketWithoutLimit,
    #[error(
        "token_bucket with burst {burst}, requests_per_unit {limit} and a {} window is too large to compute exactly: keep 101 × burst × max(requests_per_unit, window in µs / requests_per_unit) under 2^52, or use fixed_window or sliding_window",
        crate::base::duration::format(*.window)
    )]
    TokenBucketTooLarge {
        burst: u64,
        limit: u64,
        window: Duration,
    },
    #[error("invalid calendar '{0}'; expected {PERIOD_NAMES}")]
    Calendar(String),
    #[error("unknown time zone '{0}'; expected an IANA name such as UTC, Europe/Berlin or America/New_York")]
    TimeZone(String),
    #[error("invalid week_starts '{0}'; expected {WEEKDAY_NAMES}")]
    WeekStarts(String),
    #[error("{0} is only valid with calendar")]
    CalendarOnly(&'static str),
    #[error("week_starts is only valid with calendar: week")]
    WeekStartsWithoutWeek,
    #[error(
        "calendar needs algorithm fixed_window (found {0}): a calendar period is a fixed window"
    )]
    CalendarAlgorithm(&'static str),
    #[error("calendar cannot be combined with window: the calendar period is the window")]
    CalendarWithWindow,
    #[error("calendar cannot be combined with lease")]
    CalendarWithLease,
    #[error(
        "unit '{unit}' disagrees with calendar '{calendar}'; leave unit out or make them agree"
    )]
    CalendarUnit { unit: String, calendar: String },
    #[error("invalid lease_ttl '{0}': expected whole seconds from 1s to 1d, like 30s or 5m")]
    SlotHold(String),
    #[error(
        "invalid max_wait '{0}': expected whole milliseconds from 1ms to 60s, like 200ms or 2s"
    )]
    MaxWait(String),
    #[error(
        "max_wait needs algorithm token_bucket (found {0}): a bucket says when a request fits; a window only when it ends"
    )]
    MaxWaitAlgorithm(&'static str),
    #[error(
        "max_wait is longer than this bucket can hold: at most {} (100 × burst refills)",
        crate::base::duration::format(*.most)
    )]
    MaxWaitTooLong { most: Duration },
    #[error("max_wait cannot be combined with lease: units an instance holds ahead are spent at once or not at all")]
    MaxWaitWithLease,
    #[error("max_wait cannot be combined with overdraft: an overdraft charge always lands, so nothing waits")]
    MaxWaitWithOverdraft,
    #[error(
        "shares are only valid on a shared: true limit (a pool every value of the rule shares)"
    )]
    SharesNotShared,
    #[error("shares need algorithm fixed_window (found {0}): a class's use is counted per window")]
    SharesAlgorithm(&'static str),
    #[error("shares cannot be combined with {0}")]
    SharesWith(&'static str),
    #[error("shares need by (the descriptor entry naming the class) and at least one class")]
    SharesEmpty,
    #[error("invalid class name '{0}': 1 to 64 of A-Z, a-z, 0-9, _, - and .")]
    SharesClassName(String),
    #[error("class '{0}' has share {1}: expected a fraction of the pool above 0 and at most 1")]
    SharesFraction(String, String),
    #[error("the classes' shares sum to {0}: guarantees cannot add up to more than the pool (1)")]
    SharesSum(String),
    #[error("default class '{0}' is not one of the classes")]
    SharesDefault(String),
    #[error("borrow_until {0}: expected a fraction of the pool above 0 and at most 1")]
    SharesBorrowUntil(String),
    #[error(
        "fair_share is only valid on a shared: true limit (a pool every value of the rule shares)"
    )]
    FairShareNotShared,
    #[error(
        "fair_share needs algorithm fixed_window (found {0}): a tenant's use is counted per window"
    )]
    FairShareAlgorithm(&'static str),
    #[error("fair_share cannot be combined with {0}")]
    FairShareWith(&'static str),
    #[error("fair_share needs by (the descriptor entry naming the tenant)")]
    FairShareBy,
    #[error("fair_share above {0}: expected a fraction of the pool above 0 and at most 1")]
    FairShareAbove(String),
    #[error("fair_share floor 0: a tenant's share is at least 1 unit")]
    FairShareFloor,
    #[error("fair_share max_tenants {0}: expected 1 to 1000000")]
    FairShareMaxTenants(u64),
    #[error("lease_ttl is only valid with algorithm concurrency")]
    SlotHoldWithoutConcurrency,
    #[error("a concurrency limit cannot also have {0}")]
    Concurrency(&'static str),
    #[error("a concurrency limit holds from 1 to 10000 slots (requests_per_unit), found {0}")]
    ConcurrencyCap(u32),
    #[error("spend replaces requests_per_unit: a limit is counted in money or in units, not both")]
    SpendWithRequests,
    #[error("spend cannot be combined with {0}")]
    SpendWith(&'static str),
    #[error(
        "spend {} is too large to count exactly: 101 × the budget in micro-units must stay \
         under 2^53 (at most {} per limit)",
        crate::limit::money::format_micros(*.0),
        crate::limit::money::format_micros(crate::limit::money::MAX_SPEND)
    )]
    SpendTooLarge(u64),
    #[error("a spend limit needs the domain's prices: (a price table per model and token kind)")]
    SpendWithoutPrices,
    #[error(
        "global cannot be a sliding_window: a lease granted in one sliding window is spent in the next, overlapping one, so no window's total could be bounded (use fixed_window)"
    )]
    GlobalSliding,
    #[error("global needs algorithm fixed_window (found {0}); a global token bucket is simulated (region-sim), not served yet")]
    GlobalAlgorithm(&'static str),
    #[error("global cannot be combined with {0}")]
    GlobalWith(&'static str),
    #[error("invalid region name '{0}': 1 to 64 of A-Z, a-z, 0-9, _, - and .")]
    GlobalRegionName(String),
    #[error("global regions: expected 1 to 64 regions, found {0}")]
    GlobalRegions(usize),
    #[error("global regions: '{0}' is listed twice")]
    GlobalRegionTwice(String),
    #[error("global home '{0}' is not one of its regions")]
    GlobalHomeNotListed(String),
    #[error("global safe_share needs on_partition: safe_share")]
    GlobalSafeShareWithRefuse,
    #[error("global safe_share {0}: expected a fraction of the limit above 0 and at most 0.5")]
    GlobalSafeShare(String),
    #[error("global on_partition '{0}': expected refuse or safe_share")]
    GlobalOnPartition(String),
    #[error("global limit '{0}' needs this instance's region (--region, TOLLGATE_REGION)")]
    GlobalWithoutRegion(String),
    #[error("global limit '{id}' is not shared by this instance's region '{region}' (its regions: list)")]
    GlobalNotListed { id: String, region: String },
    #[error("global limit '{id}' is homed in region '{home}', whose Redis this instance has no way to reach: add --region-redis {home}=URL (TOLLGATE_REGION_REDIS)")]
    GlobalHomeUnreachable { id: String, home: String },
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// A lease a usage domain (`--usage-domains`) makes impossible: its limits are overdraft
    /// limits.
    #[error("{0} (every limit of a usage domain, --usage-domains, is an overdraft limit)")]
    LeaseInUsageDomain(#[source] LeaseError),
}

/// A `prices:` table that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PricesError {
    #[error("per_million_tokens names no model and there is no default")]
    NoModels,
    #[error("model '{0}' has no price")]
    ModelWithoutPrice(String),
    #[error("default has no price")]
    DefaultWithoutPrice,
    #[error("model_key and kind_key are both '{0}'")]
    SameKeys(String),
}

/// A `lease` a limit cannot have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    #[error("lease is only valid on a shared limit (shared: true)")]
    NotShared,
    #[error(
        "lease needs algorithm fixed_window: leased units expire with the window they were charged in"
    )]
    NotFixedWindow,
    #[error("lease cannot be combined with overdraft")]
    Overdraft,
    #[error("lease must be from 1 to requests_per_unit ({limit}), found {lease}")]
    OutOfRange { lease: u64, limit: u64 },
}
