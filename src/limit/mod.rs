//! What a limit *is*: its unit, rate, window, algorithm and flags (and a pool's shares by
//! class), compiled from config (or from a request's `limit` override) into the numbers the
//! stores use.
//!
//! `LimitParams` is the part the algorithms need; it is `Copy` so stores can
//! carry it without touching the rest (names, replaces) on the hot path. Units are in
//! [`unit`], calendar periods in [`calendar`].

pub mod calendar;
pub mod money;
pub mod regions;
pub mod unit;

use crate::limit::calendar::Calendar;
use crate::limit::unit::Unit;

/// The accepted `algorithm` names, for error messages.
pub const ALGORITHM_NAMES: &str = "fixed_window, sliding_window, token_bucket or concurrency";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Epoch-aligned fixed windows, as envoyproxy/ratelimit.
    FixedWindow,
    /// Exact trailing window over a log of charges.
    SlidingWindow,
    /// GCRA: one theoretical arrival time per key.
    TokenBucket,
    /// A cap on requests in flight: slots held under leases until released or expired
    /// (`algorithm::concurrency`).
    Concurrency,
}

impl Algorithm {
    pub fn parse(s: &str) -> Option<Algorithm> {
        Some(match s {
            "fixed_window" => Algorithm::FixedWindow,
            "sliding_window" => Algorithm::SlidingWindow,
            "token_bucket" => Algorithm::TokenBucket,
            "concurrency" => Algorithm::Concurrency,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// One letter naming the algorithm in counter keys,
    /// so limits with different algorithms never share state.
    pub fn letter(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "f",
            Algorithm::SlidingWindow => "s",
            Algorithm::TokenBucket => "t",
            Algorithm::Concurrency => "c",
        }
    }
}

/// The numbers an algorithm needs. All times are microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitParams {
    pub algorithm: Algorithm,
    /// Requests (or cost units) allowed per window; for a token bucket, the refill per window;
    /// for a concurrency limit, the slots that may be held at once.
    pub limit: u64,
    /// The window; a calendar window's nominal length (its real one comes from `calendar`);
    /// a concurrency limit's hold (`lease_ttl`: how long a slot stays held).
    pub window_us: u64,
    /// Token bucket capacity (defaults to `limit`); equal to `limit` for the other algorithms.
    pub burst: u64,
    /// Charges always land; the limit answers OVER_LIMIT while nothing is left.
    pub overdraft: bool,
    /// A fixed window that is a calendar period in a time zone (`calendar:`), not an
    /// epoch-aligned one.
    pub calendar: Option<Calendar>,
    /// `max_wait:` (token buckets only): a charge that would fit within this many µs is
    /// admitted now and held until it fits (0: never wait). The service lowers it to what the
    /// caller's deadline leaves (`service::hold`); it never changes the counter's key.
    pub max_wait_us: u64,
    /// A class's counter of a shared pool (`shares:`, see [`shares`]): `limit` is the class's
    /// guarantee, and beyond it a charge still fits while the pool's use, with the request's
    /// charge, stays within this many units. 0: an ordinary limit. A tenant's counter of a
    /// fair share (`fair_share:`) borrows the same way, up to the pool's `above`.
    pub borrow_until: u64,
    /// A tenant's counter of a pool's fair share (see [`FairShare`]): the floor of its share
    /// (at least 1); `limit` is the pool's, and the charge right after it in its batch is the
    /// pool's count of active tenants. 0: an ordinary limit.
    pub fair_floor: u64,
    /// The count of a pool's active tenants (a fixed window charged nothing): the most
    /// tenants it counts (`limit` is the same). 0: an ordinary limit.
    pub fair_cap: u64,
    /// A fixed window whose end is given, not computed (µs on the wall clock; 0: computed):
    /// a global limit's regional lease, which is counted per window of the authority's
    /// (`docs/multi-region.md`), not per window of this instance's clock.
    pub ends_at_us: u64,
}

/// Debt beyond a full limit is capped at this many times its capacity: usage (an overdraft's
/// or, with `--count-rejected`, a denied request's) stops adding there, so no counter grows
/// without bound and no key lives longer than about 101 windows.
pub const DEBT_CAP_FACTOR: u64 = 100;

impl LimitParams {
    /// The most one request can ever be granted: a cost above this can never succeed.
    pub fn capacity(&self) -> u64 {
        match self.algorithm {
            Algorithm::TokenBucket => self.burst,
            _ => self.limit,
        }
    }

    /// The most usage a counter holds: a full limit plus [`DEBT_CAP_FACTOR`] × capacity.
    pub fn usage_cap(&self) -> u64 {
        self.capacity().saturating_mul(DEBT_CAP_FACTOR + 1)
    }

    /// A counter a pool keeps beside its own (a class's, a tenant's, the active tenants'):
    /// it adds no status to the response and no statistic; its pool reports the request.
    pub fn is_pool_part(&self) -> bool {
        self.borrow_until > 0 || self.fair_cap > 0
    }
}

/// A compiled limit: what to enforce and what to report.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// `name` from config; empty when none was given.
    pub name: String,
    pub unit: Unit,
    pub requests_per_unit: u32,
    pub params: LimitParams,
    /// One counter for every value the rule matches (the global level).
    pub shared: bool,
    /// `lease: N` on a shared limit: the Redis store takes N units at a time and spends them
    /// locally (0: none). See `store::redis::local::lease`.
    pub lease: u64,
    /// Names of limits this one replaces when both apply to one request.
    pub replaces: Vec<String>,
    /// Suffix that makes this limit's counter key distinct from other limits of the same rule.
    pub key_suffix: String,
    /// The `limit` label of its metrics: its name, else its rule's path (`domain.key_value`),
    /// or [`OVERRIDE_LABEL`].
    pub metric_label: String,
    /// `spend:`: counted in micro-units of money, each charge's tokens priced by the domain's
    /// price table (see [`money`]).
    pub spend: bool,
    /// `shares:` on a shared pool: guaranteed shares by class (see [`Shares`]).
    pub shares: Option<std::sync::Arc<Shares>>,
    /// `fair_share:` on a shared pool: a fair share among its active tenants (see
    /// [`FairShare`]).
    pub fair_share: Option<std::sync::Arc<FairShare>>,
    /// `global:`: one limit across regions, spent from this region's lease (see
    /// [`regions`]).
    pub global: Option<std::sync::Arc<regions::AcrossRegions>>,
}

/// The `limit` label of every request's own `limit` override.
pub const OVERRIDE_LABEL: &str = "override";

impl Limit {
    /// A limit built from its parts; `key_suffix` is derived from the algorithm and window.
    pub fn new(name: String, unit: Unit, requests_per_unit: u32, params: LimitParams) -> Limit {
        let key_suffix = default_key_suffix(&params);
        Limit {
            metric_label: name.clone(),
            name,
            unit,
            requests_per_unit,
            params,
            shared: false,
            lease: 0,
            replaces: Vec::new(),
            key_suffix,
            spend: false,
            shares: None,
            fair_share: None,
            global: None,
        }
    }

    /// A request's `limit` override: a fixed window of one unit, as envoyproxy/ratelimit;
    /// an overdraft limit in a usage domain.
    pub fn from_override(requests_per_unit: u32, unit: Unit, overdraft: bool) -> Limit {
        let window_us = unit.seconds() * 1_000_000;
        let mut limit = Limit::new(
            String::new(),
            unit,
            requests_per_unit,
            LimitParams {
                algorithm: Algorithm::FixedWindow,
                limit: requests_per_unit as u64,
                window_us,
                burst: requests_per_unit as u64,
                overdraft,
                calendar: None,
                max_wait_us: 0,
                borrow_until: 0,
                fair_floor: 0,
                fair_cap: 0,
                ends_at_us: 0,
            },
        );
        limit.metric_label = OVERRIDE_LABEL.to_string();
        limit
    }
}

/// `f60`, `s300`, `t60b20`, with `o` for overdraft: the state's shape, not its rate, so a
/// changed `requests_per_unit` keeps counting (as envoyproxy/ratelimit) but a changed window,
/// algorithm or bucket never reads another shape's state.
pub fn default_key_suffix(p: &LimitParams) -> String {
    let mut s = String::with_capacity(16);
    s.push_str(p.algorithm.letter());
    match &p.calendar {
        // `Kmonth@America/New_York`, `Kweek1@UTC` (weeks: the day they start, ISO numbered).
        Some(c) => {
            s.clear();
            s.push('K');
            s.push_str(&c.key_part());
        }
        None => s.push_str(&format_window(p.window_us)),
    }
    if p.algorithm == Algorithm::TokenBucket {
        s.push_str(&format!("r{}b{}", p.limit, p.burst));
    }
    if p.overdraft {
        s.push('o');
    }
    s
}

fn format_window(window_us: u64) -> String {
    if window_us.is_multiple_of(1_000_000) {
        format!("{}", window_us / 1_000_000)
    } else {
        format!("{}ms", window_us / 1_000)
    }
}

/// What a class's counter key adds to its pool's (see [`Shares`]).
pub const CLASS_MARK: &str = "|c=";

/// The shares of one pool (`shares:` on a `shared: true` fixed window).
///
/// A request names its class by a descriptor entry (`by: priority` → `priority=interactive`);
/// a missing or unknown class is the `default` one. Each class has a guaranteed fraction of the
/// pool and a counter of its own, beside the pool's (its key is the pool's plus
/// [`CLASS_MARK`] and the class, so it shares the pool's hash slot and one script decides
/// both). The borrowing rule, held exactly by both stores (`algorithm::batch`):
///
/// - a class that has used less than its guarantee is admitted whenever the pool has room;
/// - past its guarantee a class *borrows*: it is admitted only while the pool's use, with the
///   request, stays within `borrow_until` of the pool.
///
/// So above `borrow_until` only classes under their guarantee are admitted: a class that
/// returns finds at least the pool's headroom above `borrow_until` (less what other classes
/// under their guarantee take of it) at once, and borrowers stop there. What a borrower was
/// charged within a window stays charged: it cannot be taken back.
#[derive(Debug, Clone, PartialEq)]
pub struct Shares {
    /// The descriptor entry whose value names a request's class.
    pub by: String,
    pub classes: Vec<Class>,
    /// The class (an index into `classes`) of a request whose entry is missing or names no
    /// class.
    pub default: usize,
    /// `borrow_until` as written (a fraction of the pool), for `/rlconfig`.
    pub borrow_until: f64,
}

/// One class of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub name: String,
    /// The guaranteed fraction as written.
    pub fraction: f64,
    /// The class's counter: a fixed window like the pool's whose limit is the guarantee in
    /// units (rounded down) and whose `borrow_until` is the pool's use up to which it borrows.
    pub limit: Limit,
}

impl Shares {
    /// The class a descriptor's entries name.
    pub fn class_of<'a>(&self, mut entries: impl Iterator<Item = (&'a str, &'a str)>) -> &Class {
        let named = entries
            .find(|(k, _)| *k == self.by)
            .and_then(|(_, v)| self.classes.iter().find(|c| c.name == v));
        named.unwrap_or(&self.classes[self.default])
    }
}

/// Whether `name` may name a class: 1 to 64 of `A-Z a-z 0-9 _ - .` (it is part of a key).
pub fn valid_class_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// What a tenant's counter key adds to its pool's (see [`FairShare`]); the count of active
/// tenants is the pool's key plus [`ACTIVE_MARK`].
pub const TENANT_MARK: &str = "|t=";
pub const ACTIVE_MARK: &str = "|t";

/// A fair share among a pool's active tenants (`fair_share:` on a `shared: true` fixed
/// window).
///
/// A request names its tenant by a descriptor entry (`by: tenant`; a request without it is
/// the tenant named by the empty value). Each tenant active in the window has a counter beside
/// the pool's (its key is the pool's plus [`TENANT_MARK`] and the tenant, in the pool's hash
/// slot), and the pool counts its active tenants (a counter beside it, [`ACTIVE_MARK`]). A
/// tenant is active from its first request of the window, admitted or refused, to the
/// window's end. The rule, held exactly by both stores (`algorithm::batch`):
///
/// - while the pool's use, with the request, stays within `above` of the pool, any tenant may
///   use it;
/// - past that, a tenant is admitted only within its share: max(`floor`, the pool ÷ the active
///   tenants), rounded down.
///
/// The active count stops at `max_tenants`: a tenant arriving after that is still held to its
/// share (it has a counter), but the share divides by at most `max_tenants`.
#[derive(Debug, Clone, PartialEq)]
pub struct FairShare {
    /// The descriptor entry whose value names a request's tenant.
    pub by: String,
    /// `above` as written (a fraction of the pool), for `/rlconfig`.
    pub above: f64,
    pub floor: u64,
    pub max_tenants: u64,
    /// A tenant's counter: a fixed window like the pool's, limited to the pool's limit, with
    /// `borrow_until` the pool's use in units up to which it is free and `fair_floor` the floor.
    pub tenant: Limit,
    /// The active tenants' count: a fixed window like the pool's, limited to `max_tenants`.
    pub active: Limit,
}

impl FairShare {
    /// The tenant a descriptor's entries name (empty when none).
    pub fn tenant_of<'a>(&self, mut entries: impl Iterator<Item = (&'a str, &'a str)>) -> &'a str {
        entries.find(|(k, _)| *k == self.by).map_or("", |(_, v)| v)
    }
}
