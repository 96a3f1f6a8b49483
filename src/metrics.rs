//! Counters for Prometheus, exposed as text on the admin port's `/metrics`.
//!
//! Plain relaxed atomics: a handful of increments per decision, no locks, no allocation.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    /// Calls answered with a response, by overall code.
    pub ok: AtomicU64,
    pub over_limit: AtomicU64,
    /// Calls rejected as INVALID_ARGUMENT.
    pub invalid: AtomicU64,
    /// Store failures, by the failure mode that answered them.
    pub store_failure_error: AtomicU64,
    pub store_failure_allow: AtomicU64,
    pub store_failure_deny: AtomicU64,
    /// Descriptor statuses that were over only in shadow mode, or a request over only
    /// because of global shadow mode.
    pub shadow_over: AtomicU64,
    /// Descriptors whose cost exceeds what their limit can ever grant.
    pub unsatisfiable: AtomicU64,
}

pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Metrics {
    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::with_capacity(1024);
        let mut family = |name: &str, help: &str, samples: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, v) in samples {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        family(
            "tollgate_decisions_total",
            "ShouldRateLimit calls answered, by overall code.",
            &[
                ("{code=\"OK\"}", get(&self.ok)),
                ("{code=\"OVER_LIMIT\"}", get(&self.over_limit)),
            ],
        );
        family(
            "tollgate_invalid_requests_total",
            "Calls rejected with INVALID_ARGUMENT.",
            &[("", get(&self.invalid))],
        );
        family(
            "tollgate_store_failures_total",
            "Calls the store could not decide, by the failure mode that answered.",
            &[
                ("{mode=\"error\"}", get(&self.store_failure_error)),
                ("{mode=\"allow\"}", get(&self.store_failure_allow)),
                ("{mode=\"deny\"}", get(&self.store_failure_deny)),
            ],
        );
        family(
            "tollgate_shadow_over_limit_total",
            "Over-limit answers turned OK by shadow mode.",
            &[("", get(&self.shadow_over))],
        );
        family(
            "tollgate_unsatisfiable_total",
            "Descriptors whose cost exceeds what the limit can ever grant.",
            &[("", get(&self.unsatisfiable))],
        );
        out
    }
}
