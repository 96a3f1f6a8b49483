//! Config validation as a table: each bad file names the error a user would read, each good
//! file compiles. Multi-file rules (duplicate domains, merging) go through `compile_sources`
//! and `load_path` on a real directory laid out like a Kubernetes ConfigMap mount.

use std::path::{Path, PathBuf};

use tollgate::config::compile::compile_file;
use tollgate::config::global::RegionCheck;

use tollgate::config::load::{compile_sources, load_path, LoadOptions};

use tollgate::config::Config;

use tollgate::config::usage::UsageDomains;

/// A file that must be rejected: `want` must appear in the message, and `line` is the line a
/// YAML-level error points at. A rule's problem, whether found as the file is read (a limit's
/// fields checked against each other) or once it is parsed (a spend limit without `prices:`, a
/// `max_wait` past its bucket), points at the rule's first line; `None` is for the domain's
/// own problems and a rule without a key.
struct Bad {
    name: &'static str,
    yaml: &'static str,
    want: &'static str,
    line: Option<usize>,
}

const BAD: &[Bad] = &[
    Bad {
        name: "a global sliding window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, algorithm: sliding_window, global: {home: eu, regions: [eu, us]}}
",
        want: "global cannot be a sliding_window",
        line: Some(3),
    },
    Bad {
        name: "a global token bucket",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, algorithm: token_bucket, global: {home: eu, regions: [eu, us]}}
",
        want: "global needs algorithm fixed_window (found token_bucket)",
        line: Some(3),
    },
    Bad {
        name: "a global limit that is not shared",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, global: {home: eu, regions: [eu, us]}}
",
        want: "global cannot be combined with shared: false",
        line: Some(3),
    },
    Bad {
        name: "a global home that is not one of its regions",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: ap, regions: [eu, us]}}
",
        want: "global home 'ap' is not one of its regions",
        line: Some(3),
    },
    Bad {
        name: "a global safe share above one half",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us], on_partition: safe_share, safe_share: 0.9}}
",
        want: "global safe_share 0.9: expected a fraction of the limit above 0 and at most 0.5",
        line: Some(3),
    },
    Bad {
        name: "a global limit with instance leases",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, lease: 5, global: {home: eu, regions: [eu, us]}}
",
        want: "global cannot be combined with lease",
        line: Some(3),
    },
    Bad {
        name: "a global region with a space in its name",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, \"u s\"]}}
",
        want: "invalid region name 'u s'",
        line: Some(3),
    },
    Bad {
        name: "a global limit with no region",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: []}}
",
        want: "global regions: expected 1 to 64 regions, found 0",
        line: Some(3),
    },
    Bad {
        name: "a global region listed twice",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us, eu]}}
",
        want: "global regions: 'eu' is listed twice",
        line: Some(3),
    },
    Bad {
        name: "a global safe share without on_partition: safe_share",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us], safe_share: 0.1}}
",
        want: "global safe_share needs on_partition: safe_share",
        line: Some(3),
    },
    Bad {
        name: "a global on_partition of neither kind",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us], on_partition: wait}}
",
        want: "global on_partition 'wait': expected refuse or safe_share",
        line: Some(3),
    },
    Bad {
        name: "shares with a lease",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, lease: 2, shares: {by: p, classes: {a: 0.5}, default: a}}
",
        want: "shares cannot be combined with lease",
        line: Some(3),
    },
    Bad {
        name: "shares with no class",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, shares: {by: p, classes: {}, default: a}}
",
        want: "shares need by (the descriptor entry naming the class) and at least one class",
        line: Some(3),
    },
    Bad {
        name: "a class name with a space",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, shares: {by: p, classes: {\"a b\": 0.5}, default: \"a b\"}}
",
        want: "invalid class name 'a b'",
        line: Some(3),
    },
    Bad {
        name: "a class with a share of 0",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, shares: {by: p, classes: {a: 0}, default: a}}
",
        want: "class 'a' has share 0: expected a fraction of the pool above 0 and at most 1",
        line: Some(3),
    },
    Bad {
        name: "shares borrowing past the pool",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, shares: {by: p, classes: {a: 0.5}, default: a, borrow_until: 1.5}}
",
        want: "borrow_until 1.5: expected a fraction of the pool above 0 and at most 1",
        line: Some(3),
    },
    Bad {
        name: "a fair share naming no tenant entry",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, fair_share: {by: \"\"}}
",
        want: "fair_share needs by (the descriptor entry naming the tenant)",
        line: Some(3),
    },
    Bad {
        name: "a spend bucket with a burst",
        yaml: "domain: d
prices: {per_million_tokens: {m: {output: 1}}}
descriptors:
  - key: k
    rate_limit: {unit: hour, algorithm: token_bucket, spend: 5, burst: 3}
",
        want: "spend cannot be combined with burst",
        line: Some(4),
    },
    Bad {
        name: "a window longer than ten years",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, window: 30000w}
",
        want: "invalid window '30000w': the longest window is 3650d (ten years)",
        line: Some(4),
    },
    Bad {
        name: "unknown top-level key",
        yaml: "domain: d
descriptor:
  - key: k
",
        want: "unknown key `descriptor`",
        line: Some(2),
    },
    Bad {
        name: "unknown rule key",
        yaml: "domain: d
descriptors:
  - key: k
    valu: v
",
        want: "unknown key `valu`",
        line: Some(4),
    },
    Bad {
        name: "unknown limit key",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requestsperunit: 5
",
        want: "unknown key `requestsperunit`",
        line: Some(6),
    },
    Bad {
        name: "unknown key in a nested rule",
        yaml: "domain: d
descriptors:
  - key: k
    descriptors:
      - key: k2
        rate_limit:
          unit: second
          requests_per_unit: 1
        shadowmode: true
",
        want: "unknown key `shadowmode`",
        line: Some(9),
    },
    Bad {
        name: "unknown key is quoted as written, even when it contains 'field'",
        yaml: "domain: d
descriptors:
  - key: k
    airfield: x
",
        want: "unknown key `airfield`",
        line: Some(4),
    },
    Bad {
        name: "yaml syntax error",
        yaml: "domain: d
descriptors:
  - key: [k
",
        want: "error loading config file",
        line: Some(4),
    },
    Bad {
        name: "empty file",
        yaml: "",
        want: "config file cannot have empty domain",
        line: None,
    },
    Bad {
        name: "missing domain",
        yaml: "descriptors:
  - key: k
",
        want: "config file cannot have empty domain",
        line: None,
    },
    Bad {
        name: "empty domain",
        yaml: "domain: \"\"
descriptors: []
",
        want: "config file cannot have empty domain",
        line: None,
    },
    Bad {
        name: "missing key",
        yaml: "domain: d
descriptors:
  - value: v
    rate_limit:
      unit: minute
      requests_per_unit: 1
",
        want: "'d': descriptor has empty key",
        line: None,
    },
    Bad {
        name: "empty key in a nested rule",
        yaml: "domain: d
descriptors:
  - key: k
    value: v
    descriptors:
      - key: \"\"
        rate_limit:
          unit: minute
          requests_per_unit: 1
",
        want: "'d.k_v': descriptor has empty key",
        line: None,
    },
    Bad {
        name: "duplicate key and value",
        yaml: "domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: v
    rate_limit: {unit: hour, requests_per_unit: 2}
",
        want: "duplicate descriptor composite key 'd.k_v'",
        line: Some(6),
    },
    Bad {
        name: "duplicate key-only rule",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 2}
",
        want: "duplicate descriptor composite key 'd.k'",
        line: Some(5),
    },
    Bad {
        name: "duplicate wildcard",
        yaml: "domain: d
descriptors:
  - key: k
    value: v*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: v*
    rate_limit: {unit: hour, requests_per_unit: 2}
",
        want: "duplicate descriptor composite key 'd.k_v*'",
        line: Some(6),
    },
    Bad {
        name: "duplicate in a nested level",
        yaml: "domain: d
descriptors:
  - key: k
    value: v
    descriptors:
      - key: k2
        value: w
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: k2
        value: w
        rate_limit: {unit: minute, requests_per_unit: 1}
",
        want: "duplicate descriptor composite key 'd.k_v.k2_w'",
        line: Some(9),
    },
    Bad {
        name: "numeric and string value are the same value",
        yaml: "domain: d
descriptors:
  - key: code
    value: 200
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: code
    value: \"200\"
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        want: "duplicate descriptor composite key 'd.code_200'",
        line: Some(6),
    },
    Bad {
        name: "bad unit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 1}
",
        want: "descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'; expected second, minute, hour, day, week, month or year",
        line: Some(4),
    },
    Bad {
        name: "missing unit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {requests_per_unit: 1}
",
        want: "'d.k': invalid rate limit unit ''",
        line: Some(3),
    },
    Bad {
        name: "unlimited with a unit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unlimited: true, unit: minute}
",
        want: "'d.k': should not specify rate limit unit when unlimited",
        line: Some(3),
    },
    Bad {
        name: "unlimited combined with another limit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limits:
      - unlimited: true
      - {unit: minute, requests_per_unit: 1}
",
        want: "'d.k': an unlimited rate limit cannot be combined with other limits",
        line: Some(3),
    },
    Bad {
        name: "unlimited after another limit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
    rate_limits:
      - unlimited: true
",
        want: "an unlimited rate limit cannot be combined with other limits",
        line: Some(3),
    },
    Bad {
        name: "empty replaces name",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 1
      replaces:
        - name: \"\"
",
        want: "'d.k': should not have an empty replaces entry",
        line: Some(3),
    },
    Bad {
        name: "replaces entry without a name",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 1
      replaces: [{}]
",
        want: "should not have an empty replaces entry",
        line: Some(3),
    },
    Bad {
        name: "replaces itself",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit:
      name: per_key
      unit: minute
      requests_per_unit: 1
      replaces:
        - name: per_key
",
        want: "'d.k': replaces should not contain name of same descriptor",
        line: Some(3),
    },
    Bad {
        name: "share_threshold on an exact value",
        yaml: "domain: d
descriptors:
  - key: k
    value: v
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        want: "share_threshold can only be used with wildcard values (containing '*'), but found key 'd.k_v'",
        line: Some(3),
    },
    Bad {
        name: "share_threshold on a key-only rule",
        yaml: "domain: d
descriptors:
  - key: k
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        want: "share_threshold can only be used with wildcard values (containing '*'), but found key 'd.k'",
        line: Some(3),
    },
    Bad {
        name: "bad algorithm",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: leaky_bucket}
",
        want: "rate_limit.algorithm: invalid algorithm 'leaky_bucket'; expected fixed_window, sliding_window, token_bucket or concurrency",
        line: Some(4),
    },
    Bad {
        name: "window without a unit suffix",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, window: \"90\"}
",
        want: "rate_limit.window: invalid window '90': expected a positive whole number of milliseconds",
        line: Some(4),
    },
    Bad {
        name: "zero window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, window: 0s}
",
        want: "invalid window '0s'",
        line: Some(4),
    },
    Bad {
        name: "window with an unknown unit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, window: 5 parsecs}
",
        want: "invalid window '5 parsecs'",
        line: Some(4),
    },
    Bad {
        name: "burst on a fixed window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, burst: 5}
",
        want: "'d.k': burst is only valid with algorithm token_bucket",
        line: Some(3),
    },
    Bad {
        name: "lease on a limit that is not shared",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 10}
",
        want: "'d.k': lease is only valid on a shared limit (shared: true)",
        line: Some(3),
    },
    Bad {
        name: "lease on a sliding window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, shared: true, lease: 10, algorithm: sliding_window}
",
        want: "lease needs algorithm fixed_window",
        line: Some(3),
    },
    Bad {
        name: "lease larger than the limit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, shared: true, lease: 101}
",
        want: "lease must be from 1 to requests_per_unit (100), found 101",
        line: Some(3),
    },
    Bad {
        name: "lease beside another shared limit of the rule",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limits:
      - {unit: minute, requests_per_unit: 100, shared: true, lease: 10}
      - {unit: hour, requests_per_unit: 1000, shared: true}
",
        want: "'d.k': lease: a rule with more than one shared limit cannot lease them",
        line: Some(3),
    },
    Bad {
        name: "lease with overdraft",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, shared: true, lease: 10, overdraft: true}
",
        want: "lease cannot be combined with overdraft",
        line: Some(3),
    },
    Bad {
        name: "burst on a sliding window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_window, burst: 5}
",
        want: "burst is only valid with algorithm token_bucket",
        line: Some(3),
    },
    Bad {
        name: "zero burst",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: token_bucket, burst: 0}
",
        want: "'d.k': burst must be at least 1",
        line: Some(3),
    },
    Bad {
        name: "token bucket with requests_per_unit 0",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 0, algorithm: token_bucket}
",
        want: "'d.k': a token_bucket limit needs requests_per_unit of at least 1",
        line: Some(3),
    },
    Bad {
        name: "token bucket without requests_per_unit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, algorithm: token_bucket}
",
        want: "a token_bucket limit needs requests_per_unit of at least 1",
        line: Some(3),
    },
    Bad {
        name: "an unknown time zone",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: month, timezone: Mars/Olympus, requests_per_unit: 5}
",
        want: "unknown time zone 'Mars/Olympus'; expected an IANA name",
        line: Some(4),
    },
    Bad {
        name: "an unknown calendar period",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: fortnight, requests_per_unit: 5}
",
        want: "invalid calendar 'fortnight'; expected day, week, month, quarter or year",
        line: Some(4),
    },
    Bad {
        name: "a calendar with a window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: day, window: 1h, requests_per_unit: 5}
",
        want: "calendar cannot be combined with window",
        line: Some(3),
    },
    Bad {
        name: "a calendar on a sliding window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: day, algorithm: sliding_window, requests_per_unit: 5}
",
        want: "calendar needs algorithm fixed_window (found sliding_window)",
        line: Some(3),
    },
    Bad {
        name: "a calendar on a token bucket",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: day, algorithm: token_bucket, requests_per_unit: 5}
",
        want: "calendar needs algorithm fixed_window (found token_bucket)",
        line: Some(3),
    },
    Bad {
        name: "a calendar on a concurrency limit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: day, algorithm: concurrency, requests_per_unit: 5}
",
        want: "calendar needs algorithm fixed_window (found concurrency)",
        line: Some(3),
    },
    Bad {
        name: "a calendar with a lease",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: day, requests_per_unit: 5, shared: true, lease: 2}
",
        want: "calendar cannot be combined with lease",
        line: Some(3),
    },
    Bad {
        name: "a calendar whose unit disagrees",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: month, unit: day, requests_per_unit: 5}
",
        want: "unit 'day' disagrees with calendar 'month'",
        line: Some(3),
    },
    Bad {
        name: "week_starts on a month",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: month, week_starts: sunday, requests_per_unit: 5}
",
        want: "week_starts is only valid with calendar: week",
        line: Some(3),
    },
    Bad {
        name: "a timezone without a calendar",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: day, timezone: UTC, requests_per_unit: 5}
",
        want: "timezone is only valid with calendar",
        line: Some(3),
    },
    Bad {
        name: "an unknown weekday",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {calendar: week, week_starts: funday, requests_per_unit: 5}
",
        want: "invalid week_starts 'funday'",
        line: Some(4),
    },
    Bad {
        name: "a concurrency cap of 0",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: concurrency, requests_per_unit: 0}
",
        want: "a concurrency limit holds from 1 to 10000 slots (requests_per_unit), found 0",
        line: Some(3),
    },
    Bad {
        name: "a concurrency cap over 10000",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: concurrency, requests_per_unit: 10001}
",
        want: "found 10001",
        line: Some(3),
    },
    Bad {
        name: "a concurrency limit with a unit",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: concurrency, unit: second, requests_per_unit: 5}
",
        want: "a concurrency limit cannot also have unit",
        line: Some(3),
    },
    Bad {
        name: "a concurrency limit with overdraft",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: concurrency, requests_per_unit: 5, overdraft: true}
",
        want: "a concurrency limit cannot also have overdraft",
        line: Some(3),
    },
    Bad {
        name: "a lease_ttl under a second",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: concurrency, requests_per_unit: 5, lease_ttl: 500ms}
",
        want: "invalid lease_ttl '500ms'",
        line: Some(4),
    },
    Bad {
        name: "a max_wait on a fixed window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, max_wait: 2s}
",
        want: "max_wait needs algorithm token_bucket (found fixed_window)",
        line: Some(3),
    },
    Bad {
        name: "a max_wait over a minute",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 5
      algorithm: token_bucket
      max_wait: 2m
",
        want: "invalid max_wait '2m'",
        line: Some(8),
    },
    Bad {
        name: "a max_wait past what a bucket holds",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 1, max_wait: 20s}
",
        want: "max_wait is longer than this bucket can hold: at most 10s",
        line: Some(3),
    },
    Bad {
        name: "shares on a limit that is not shared",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shares: {by: p, classes: {a: 0.5}, default: a}}
",
        want: "shares are only valid on a shared: true limit",
        line: Some(3),
    },
    Bad {
        name: "shares summing over the pool",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 10
      shared: true
      shares: {by: p, classes: {a: 0.7, b: 0.4}, default: a}
",
        want: "the classes' shares sum to 1.1000",
        line: Some(3),
    },
    Bad {
        name: "shares on a token bucket",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, algorithm: token_bucket, shares: {by: p, classes: {a: 0.5}, default: a}}
",
        want: "shares need algorithm fixed_window (found token_bucket)",
        line: Some(3),
    },
    Bad {
        name: "a default class that is not a class",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, shares: {by: p, classes: {a: 0.5}, default: b}}
",
        want: "default class 'b' is not one of the classes",
        line: Some(3),
    },
    Bad {
        name: "a fair share on a limit that is not shared",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, fair_share: {by: tenant}}
",
        want: "fair_share is only valid on a shared: true limit",
        line: Some(3),
    },
    Bad {
        name: "a fair share on a sliding window",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, algorithm: sliding_window, fair_share: {by: tenant}}
",
        want: "fair_share needs algorithm fixed_window (found sliding_window)",
        line: Some(3),
    },
    Bad {
        name: "a fair share above the whole pool",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 10
      shared: true
      fair_share: {by: tenant, above: 1.5}
",
        want: "fair_share above 1.5: expected a fraction of the pool above 0 and at most 1",
        line: Some(3),
    },
    Bad {
        name: "a fair share with shares",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, fair_share: {by: tenant}, shares: {by: p, classes: {a: 0.5}, default: a}}
",
        want: "fair_share cannot be combined with shares",
        line: Some(3),
    },
    Bad {
        name: "a fair share with a lease",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, lease: 2, fair_share: {by: tenant, max_tenants: 0}}
",
        want: "fair_share cannot be combined with lease",
        line: Some(3),
    },
    Bad {
        name: "a fair share counting no tenant",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, fair_share: {by: tenant, max_tenants: 0}}
",
        want: "fair_share max_tenants 0: expected 1 to 1000000",
        line: Some(3),
    },
    Bad {
        name: "a fair share with a floor of 0",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, shared: true, fair_share: {by: tenant, floor: 0}}
",
        want: "fair_share floor 0: a tenant's share is at least 1 unit",
        line: Some(3),
    },
    Bad {
        name: "a max_wait with a lease",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, max_wait: 1s, shared: true, lease: 2}
",
        want: "max_wait cannot be combined with lease",
        line: Some(3),
    },
    Bad {
        name: "a max_wait with overdraft",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, max_wait: 1s, overdraft: true}
",
        want: "max_wait cannot be combined with overdraft",
        line: Some(3),
    },
    Bad {
        name: "a lease_ttl without concurrency",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5, lease_ttl: 5m}
",
        want: "lease_ttl is only valid with algorithm concurrency",
        line: Some(3),
    },
    Bad {
        name: "a spend limit without prices",
        yaml: "domain: d
descriptors:
  - key: tenant
    rate_limit: {calendar: month, spend: 500}
",
        want: "'d.tenant': a spend limit needs the domain's prices:",
        line: Some(3),
    },
    Bad {
        name: "a spend limit too large to count exactly",
        yaml: "domain: d
prices: {per_million_tokens: {m: {output: 1}}}
descriptors:
  - key: tenant
    rate_limit: {calendar: month, spend: 100000000}
",
        want: "spend 100000000 is too large to count exactly: 101 × the budget in micro-units must stay under 2^53 (at most 89180190.640999 per limit)",
        line: Some(4),
    },
    Bad {
        name: "a spend limit with requests_per_unit",
        yaml: "domain: d
prices: {per_million_tokens: {m: {output: 1}}}
descriptors:
  - key: tenant
    rate_limit: {unit: hour, spend: 5, requests_per_unit: 5}
",
        want: "spend replaces requests_per_unit",
        line: Some(4),
    },
    Bad {
        name: "a price finer than a micro-unit",
        yaml: "domain: d
prices:
  per_million_tokens:
    m: {input: 0.0000001}
descriptors:
  - key: tenant
    rate_limit: {unit: hour, spend: 5}
",
        want: "invalid amount '0.0000001': expected a decimal number with at most 6 places",
        line: Some(4),
    },
    Bad {
        name: "a negative price",
        yaml: "domain: d
prices:
  per_million_tokens:
    m: {input: -1}
",
        want: "invalid amount '-1'",
        line: Some(4),
    },
    Bad {
        name: "a model without prices",
        yaml: "domain: d
prices:
  per_million_tokens:
    m: {}
",
        want: "domain 'd': prices: model 'm' has no price",
        line: None,
    },
];

#[test]
fn bad_files_are_rejected_with_an_actionable_error() {
    let mut failures = Vec::new();
    for case in BAD {
        let err = match compile_file("limits.yaml", case.yaml, &UsageDomains::default()) {
            Ok(_) => {
                failures.push(format!(
                    "{}: compiled, want error {:?}",
                    case.name, case.want
                ));
                continue;
            }
            Err(e) => e,
        };
        let shown = err.to_string();
        let prefix = match case.line {
            Some(n) => format!("limits.yaml: line {n}: "),
            None => "limits.yaml: ".to_string(),
        };
        if err.file != "limits.yaml"
            || err.line != case.line
            || !shown.starts_with(&prefix)
            || !err.problem.to_string().contains(case.want)
        {
            failures.push(format!(
                "{}: got {shown:?} (line {:?}), want prefix {prefix:?} and {:?}",
                case.name, err.line, case.want
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// A file that must compile, and one `(key, value)` its top level must resolve to a rule
/// with this composite key.
struct Good {
    name: &'static str,
    yaml: &'static str,
    lookup: (&'static str, &'static str),
    full_key: &'static str,
}

const GOOD: &[Good] = &[
    Good {
        name: "numeric value is read as its text",
        yaml: "domain: d
descriptors:
  - key: code
    value: 200
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("code", "200"),
        full_key: "d.code_200",
    },
    Good {
        name: "boolean value is read as its text",
        yaml: "domain: d
descriptors:
  - key: internal
    value: true
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("internal", "true"),
        full_key: "d.internal_true",
    },
    // YAML reads these as numbers or bools; envoyproxy/ratelimit's Go parser gives a string
    // field the text as written, and so does tollgate (read back, they would be "1.1", "44",
    // "true", "31": never what Envoy sends).
    Good {
        name: "decimal value keeps its spelling",
        yaml: "domain: d
descriptors:
  - key: version
    value: 1.10
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("version", "1.10"),
        full_key: "d.version_1.10",
    },
    Good {
        name: "signed value keeps its sign",
        yaml: "domain: d
descriptors:
  - key: cc
    value: +44
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("cc", "+44"),
        full_key: "d.cc_+44",
    },
    Good {
        name: "capitalised boolean keeps its case",
        yaml: "domain: d
descriptors:
  - key: internal
    value: True
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("internal", "True"),
        full_key: "d.internal_True",
    },
    Good {
        name: "hexadecimal value stays hexadecimal",
        yaml: "domain: d
descriptors:
  - key: flags
    value: 0x1F
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("flags", "0x1F"),
        full_key: "d.flags_0x1F",
    },
    Good {
        name: "exact, wildcard and key-only rules of one key coexist",
        yaml: "domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    value: v*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
",
        lookup: ("k", "vv"),
        full_key: "d.k_v*",
    },
    Good {
        name: "one key and value under two parents is not a duplicate",
        yaml: "domain: d
descriptors:
  - key: a
    descriptors:
      - key: k
        value: v
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    descriptors:
      - key: k
        value: v
        rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("b", "x"),
        full_key: "d.b",
    },
    Good {
        name: "upper-case unit, several limits, token bucket with burst, unlimited with replaces",
        yaml: "domain: d
descriptors:
  - key: k
    rate_limits:
      - {unit: MINUTE, requests_per_unit: 10, name: per_minute}
      - {unit: hour, requests_per_unit: 100, algorithm: sliding_window, window: 90m}
      - {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 20}
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: per_minute}]
",
        lookup: ("vip", "x"),
        full_key: "d.vip",
    },
    Good {
        name: "share_threshold on a wildcard",
        yaml: "domain: d
descriptors:
  - key: k
    value: \"*\"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
",
        lookup: ("k", "anything"),
        full_key: "d.k_*",
    },
];

#[test]
fn good_files_compile() {
    let mut failures = Vec::new();
    for case in GOOD {
        match compile_file("limits.yaml", case.yaml, &UsageDomains::default()) {
            Err(e) => failures.push(format!("{}: rejected: {e}", case.name)),
            Ok(domain) => {
                let (k, v) = case.lookup;
                let found = domain.root.lookup(k, v).map(|r| r.full_key.as_str());
                if found != Some(case.full_key) {
                    failures.push(format!(
                        "{}: lookup({k:?}, {v:?}) found {found:?}, want {:?}",
                        case.name, case.full_key
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

const FILE_A: &str = "domain: shared
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
";
const FILE_B: &str = "domain: shared
descriptors:
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2}
";
const FILE_A_AGAIN: &str = "domain: shared
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 5}
";
const FILE_OTHER: &str = "domain: other
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
";

fn sources(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

/// The composite keys `domain` resolves `(key, value)` pairs to.
fn resolves(config: &Config, domain: &str, pairs: &[(&str, &str)]) -> Vec<Option<String>> {
    pairs
        .iter()
        .map(|(k, v)| {
            config
                .domains
                .get(domain)
                .and_then(|d| d.root.lookup(k, v))
                .map(|r| r.full_key.clone())
        })
        .collect()
}

#[test]
fn several_files() {
    struct Case {
        name: &'static str,
        files: &'static [(&'static str, &'static str)],
        merge_domains: bool,
        /// `Err(substring)` or the composite keys of `shared`'s `a` and `b`.
        want: Result<[Option<&'static str>; 2], &'static str>,
    }
    let cases = [
        Case {
            name: "distinct domains load side by side",
            files: &[("a.yaml", FILE_A), ("other.yaml", FILE_OTHER)],
            merge_domains: false,
            want: Ok([Some("shared.a"), None]),
        },
        Case {
            name: "a domain in two files is rejected",
            files: &[("a.yaml", FILE_A), ("b.yaml", FILE_B)],
            merge_domains: false,
            want: Err("b.yaml: duplicate domain 'shared' in config file"),
        },
        Case {
            name: "merge_domains merges a domain's rules",
            files: &[("a.yaml", FILE_A), ("b.yaml", FILE_B)],
            merge_domains: true,
            want: Ok([Some("shared.a"), Some("shared.b")]),
        },
        Case {
            name: "merging still rejects a duplicate composite key",
            files: &[
                ("a.yaml", FILE_A),
                ("b.yaml", FILE_B),
                ("c.yaml", FILE_A_AGAIN),
            ],
            merge_domains: true,
            want: Err("c.yaml: duplicate descriptor composite key 'shared.a'"),
        },
        Case {
            name: "a bad file among good ones names itself",
            files: &[("a.yaml", FILE_A), ("broken.yaml", "domain: \"\"\n")],
            merge_domains: true,
            want: Err("broken.yaml: config file cannot have empty domain"),
        },
    ];
    let mut failures = Vec::new();
    for case in cases {
        let opts = LoadOptions {
            merge_domains: case.merge_domains,
            ..LoadOptions::default()
        };
        let got = compile_sources(&sources(case.files), &opts);
        let ok = match (&got, &case.want) {
            (Ok(config), Ok(want)) => {
                let want: Vec<Option<String>> =
                    want.iter().map(|w| w.map(str::to_string)).collect();
                resolves(config, "shared", &[("a", "x"), ("b", "x")]) == want
            }
            (Err(e), Err(want)) => e.to_string().starts_with(want),
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{}: got {:?}",
                case.name,
                got.map(|c| c.describe())
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "tollgate-config-validation-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.0.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create dir");
        }
        std::fs::write(path, text).expect("write file");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const NOT_A_CONFIG: &str = "this: is not\n  a: [valid config\n";

#[test]
fn directory_loading_reads_only_visible_yaml_files() {
    let dir = TempDir::new("plain");
    dir.write("a.yaml", FILE_A);
    dir.write("other.yml", FILE_OTHER);
    // None of these may be read: each would fail to compile or duplicate a domain.
    dir.write(".hidden.yaml", NOT_A_CONFIG);
    dir.write("..data", NOT_A_CONFIG);
    dir.write("..2024_01_01", NOT_A_CONFIG);
    dir.write("README.md", NOT_A_CONFIG);
    dir.write("limits.yaml.bak", FILE_A);
    dir.write("nested/deeper.yaml", FILE_A);

    let config = load_path(&dir.0, &LoadOptions::default()).expect("directory loads");
    let mut domains: Vec<&String> = config.domains.keys().collect();
    domains.sort();
    assert_eq!(domains, ["other", "shared"]);
    assert_eq!(
        resolves(&config, "shared", &[("a", "x")]),
        [Some("shared.a".to_string())]
    );
}

#[cfg(unix)]
#[test]
fn directory_loading_follows_a_configmap_mount() {
    use std::os::unix::fs::symlink;

    // What Kubernetes mounts: `..2024_01_01/` holds the files, `..data` links to it, and each
    // visible file links through `..data`.
    let dir = TempDir::new("configmap");
    dir.write("..2024_01_01/limits.yaml", FILE_A);
    dir.write("..2024_01_01/other.yaml", FILE_OTHER);
    symlink("..2024_01_01", dir.0.join("..data")).expect("link ..data");
    for f in ["limits.yaml", "other.yaml"] {
        symlink(Path::new("..data").join(f), dir.0.join(f)).expect("link file");
    }

    let config = load_path(&dir.0, &LoadOptions::default()).expect("mount loads");
    assert_eq!(config.domains.len(), 2);
    assert_eq!(
        resolves(&config, "other", &[("a", "x")]),
        [Some("other.a".to_string())]
    );
}

#[test]
fn directory_errors_name_the_file() {
    struct Case {
        name: &'static str,
        files: &'static [(&'static str, &'static str)],
        merge_domains: bool,
        want_file: &'static str,
        want: &'static str,
    }
    let cases = [
        Case {
            name: "duplicate domain across files",
            files: &[("a.yaml", FILE_A), ("b.yaml", FILE_B)],
            merge_domains: false,
            want_file: "b.yaml",
            want: "duplicate domain 'shared' in config file",
        },
        Case {
            name: "duplicate composite key across merged files",
            files: &[("a.yaml", FILE_A), ("b.yaml", FILE_A_AGAIN)],
            merge_domains: true,
            want_file: "b.yaml",
            want: "duplicate descriptor composite key 'shared.a'",
        },
        Case {
            name: "unknown key in one file",
            files: &[
                ("a.yaml", FILE_A),
                (
                    "b.yaml",
                    "domain: x\ndescriptors:\n  - key: k\n    rate_limt: {}\n",
                ),
            ],
            merge_domains: true,
            want_file: "b.yaml",
            want: "unknown key `rate_limt`",
        },
    ];
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let dir = TempDir::new(&format!("errors-{i}"));
        for (name, text) in case.files {
            dir.write(name, text);
        }
        let opts = LoadOptions {
            merge_domains: case.merge_domains,
            ..LoadOptions::default()
        };
        let want_file = dir.0.join(case.want_file).display().to_string();
        match load_path(&dir.0, &opts) {
            Ok(_) => failures.push(format!("{}: loaded", case.name)),
            Err(e) => {
                if e.file != want_file
                    || !e.to_string().starts_with(&want_file)
                    || !e.problem.to_string().contains(case.want)
                {
                    failures.push(format!("{}: got {e}", case.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn a_single_file_path_loads() {
    let dir = TempDir::new("single");
    dir.write("limits.yaml", FILE_A);
    let config = load_path(&dir.0.join("limits.yaml"), &LoadOptions::default()).expect("loads");
    assert_eq!(
        resolves(&config, "shared", &[("a", "x")]),
        [Some("shared.a".to_string())]
    );
    let missing = dir.0.join("missing.yaml");
    let err = load_path(&missing, &LoadOptions::default()).expect_err("missing file");
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read config", missing.display())),
        "{err}"
    );
}

#[test]
fn a_usage_domain_makes_every_limit_an_overdraft_limit() {
    let usage = LoadOptions {
        usage_domains: UsageDomains::parse("llm-*").expect("globs"),
        ..LoadOptions::default()
    };
    let tokens = "domain: llm-tokens\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";
    let edge = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";
    let config = compile_sources(
        &[
            ("tokens.yaml".into(), tokens.into()),
            ("edge.yaml".into(), edge.into()),
        ],
        &usage,
    )
    .expect("compiles");
    let described = config.describe();
    assert!(
        described.contains("llm-tokens.tenant: unit=MINUTE requests_per_unit=100, shadow_mode: false, overdraft: true"),
        "{described}"
    );
    assert!(
        described.contains("edge.tenant: unit=MINUTE requests_per_unit=100, shadow_mode: false\n"),
        "only the matching domain: {described}"
    );

    let leased = "domain: llm-global\ndescriptors:\n  - key: model\n    rate_limit: {unit: minute, requests_per_unit: 100, shared: true, lease: 10}\n";
    let err = compile_sources(&[("leased.yaml".into(), leased.into())], &usage)
        .expect_err("a lease cannot be an overdraft limit");
    assert_eq!(
        err.to_string(),
        "leased.yaml: line 3: 'llm-global.model': lease cannot be combined with overdraft (every limit of a usage domain, --usage-domains, is an overdraft limit)"
    );
    compile_sources(
        &[("leased.yaml".into(), leased.into())],
        &LoadOptions::default(),
    )
    .expect("outside a usage domain the lease is fine");
}

/// What a usage domain (`--usage-domains`) refuses only once the file is read (its limits
/// are overdraft limits) names the line of the rule at fault, as the read-time checks do.
#[test]
fn a_usage_domain_s_refusals_name_the_rule_s_line() {
    let usage = UsageDomains::parse("llm-*").expect("globs");
    let cases = [
        (
            "{unit: hour, requests_per_unit: 10, shared: true, shares: {by: p, classes: {a: 0.5}, default: a}}",
            "shares cannot be combined with overdraft",
        ),
        (
            "{unit: hour, requests_per_unit: 10, shared: true, fair_share: {by: tenant}}",
            "fair_share cannot be combined with overdraft",
        ),
        (
            "{unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us]}}",
            "global cannot be combined with overdraft",
        ),
        (
            "{unit: second, requests_per_unit: 5, algorithm: token_bucket, max_wait: 1s}",
            "max_wait cannot be combined with overdraft",
        ),
    ];
    for (limit, want) in cases {
        let yaml = format!(
            "domain: llm-tokens\ndescriptors:\n  - key: model\n    rate_limit: {{unit: minute, requests_per_unit: 5}}\n  - key: tenant\n    descriptors:\n      - key: team\n        rate_limit: {limit}\n"
        );
        let err = compile_file("usage.yaml", &yaml, &usage).expect_err(want);
        assert_eq!(
            (err.line, err.to_string().contains(want)),
            (Some(7), true),
            "{err}"
        );
        compile_file("usage.yaml", &yaml, &UsageDomains::default())
            .expect("outside a usage domain it compiles");
    }
}

#[test]
fn a_global_limit_needs_a_region_it_lists() {
    let yaml = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us]}}
";
    let files = sources(&[("global.yaml", yaml)]);
    let check = |region: RegionCheck| {
        compile_sources(
            &files,
            &LoadOptions {
                region,
                ..LoadOptions::default()
            },
        )
    };
    let load = |region: Option<&str>| {
        check(match region {
            Some(r) => RegionCheck::One {
                region: r.to_string(),
                reachable: None,
            },
            None => RegionCheck::None,
        })
    };
    let none = load(None).expect_err("no region").to_string();
    assert!(
        none.starts_with("global.yaml: line 3: 'd.k': ")
            && none.contains("needs this instance's region (--region"),
        "{none}"
    );
    let other = load(Some("ap"))
        .expect_err("a region it does not list")
        .to_string();
    assert!(
        other.starts_with("global.yaml: line 3: 'd.k': ")
            && other.contains("not shared by this instance's region 'ap'"),
        "{other}"
    );
    // An instance of us that cannot reach eu's Redis (no --region-redis eu=URL) is refused,
    // naming the flag: it would refuse every request reaching the limit.
    let unreachable = check(RegionCheck::One {
        region: "us".into(),
        reachable: Some(vec!["us".into()]),
    })
    .expect_err("home unreachable")
    .to_string();
    assert!(
        unreachable.starts_with("global.yaml: line 3: 'd.k': ")
            && unreachable.contains("homed in region 'eu'")
            && unreachable.contains("--region-redis eu=URL"),
        "{unreachable}"
    );
    check(RegionCheck::One {
        region: "us".into(),
        reachable: Some(vec!["us".into(), "eu".into()]),
    })
    .expect("home reachable");
    // check-config without --region: the file is checked for every region it names.
    check(RegionCheck::EveryNamed).expect("every limit lists eu and us");
    let two = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us]}}
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 10, shared: true, global: {home: eu, regions: [eu, us, ap]}}
";
    let err = compile_sources(
        &sources(&[("two.yaml", two)]),
        &LoadOptions {
            region: RegionCheck::EveryNamed,
            ..LoadOptions::default()
        },
    )
    .expect_err("ap loads the file, but k does not list it")
    .to_string();
    assert!(
        err.starts_with("two.yaml: line 3: 'd.k': ")
            && err.contains("not shared by this instance's region 'ap'"),
        "{err}"
    );
    let config = load(Some("us")).expect("a listed region");
    let global = config.global_limits();
    assert_eq!(global.len(), 1);
    let g = global[0].global.as_ref().expect("global");
    assert_eq!(
        (g.home.as_str(), g.index_of("us"), g.safe_share),
        ("eu", Some(1), None)
    );
}
