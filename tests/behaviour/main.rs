//! Behaviour suites: what tollgate answers and charges, on every store. Each suite runs over
//! the memory store, a single Redis node and a Redis Cluster through the kit
//! (`support::kit`), and a failing case names its store.
//!
//! - `conformance`: a timed table per algorithm, window, cost, hierarchy, quota, shadow;
//! - `matching`: envoyproxy/ratelimit's descriptor matching and config semantics;
//! - `hierarchy`: tenant and shared limits under concurrency;
//! - `model`: the algorithms' invariants (proptest) and the stores against the model;
//! - `differential`: random configs and requests on memory and Redis, identical answers;
//! - `holes`: regressions for every exactness hole found from outside;
//! - `concurrency`: two tollgate instances on one Redis Cluster stay exact;
//! - `lease`: leased shared limits (`lease: N`) on two instances never over-admit;
//! - `replicas`: `--read-replicas` answers check-only requests from cluster replicas;
//! - `script`: the Lua script against the Rust algorithms, call by call (no service);
//! - `usage`: usage domains (`--usage-domains`) answer as overdraft limits do;
//! - `calendar`: calendar windows in time zones at their edges (month ends, DST, leap days);
//! - `slots`: concurrency caps: slots, releases, leases, two instances racing;
//! - `reservations`: reserve an estimate, settle to the actual; racing callers never overspend;
//! - `counters`: the operator's counters (read without writing, resets racing decisions) and who
//!   is being limited;
//! - `shares`: guaranteed shares of a shared pool by class: a guarantee held under another class's
//!   flood, borrowing only below `borrow_until`, racing callers never overspending;
//! - `fair`: a fair share among a shared pool's active tenants: held to the pool ÷ the active
//!   tenants past `above`, refused requests counting as active, quiet tenants keeping 90% of
//!   their share beside a noisy one (on Redis, two instances racing);
//! - `waiting`: `max_wait` holds a request until it fits instead of refusing it, in order, within
//!   its deadline and `--max-held`, and a caller gone while held gives its place back.

#[path = "../support/mod.rs"]
mod support;

mod bounds;
mod calendar;
mod concurrency;
mod conformance;
mod counters;
mod differential;
mod fair;
mod hierarchy;
mod holes;
mod lease;
mod matching;
mod model;
mod money;
mod replicas;
mod reservations;
mod script;
mod shares;
mod slots;
mod usage;
mod waiting;
