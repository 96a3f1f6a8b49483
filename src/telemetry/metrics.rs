//! Prometheus metrics, served on the admin port's `/metrics` (OpenMetrics text, from the
//! `prometheus-client` crate).
//!
//! Label sets stay bounded: domains and limits come from the config (an unknown domain counts
//! as `__unknown__`, a request's override as `limit="override"`), never from descriptor
//! values. The request path does not allocate: the counters of a domain and of a limit are
//! created once, on first use, and found again by name.
//!
//! Per limit and request, a limit's `result` is exactly one of `over_limit`, `near_limit`
//! (not over, and usage after the charge above 80% of the limit, rounded down, as
//! envoyproxy/ratelimit), `within_limit`, or `shadow` (would be over, shadow mode).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::telemetry::counted::{
    LimitResult, RequestCode, StoreOp, CONNECTION_CAUSES, FAILURE_CAUSES, OLD_CONNECTION_CAUSE,
};

/// The `domain` label of a request for a domain the config does not know.
pub const UNKNOWN_DOMAIN: &str = "__unknown__";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    domain: String,
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    domain: String,
    limit: String,
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabels {
    domain: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotLabels {
    op: &'static str,
    held: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
    /// One of [`FAILURE_CAUSES`] (`StoreError`'s cause), or [`OLD_CONNECTION_CAUSE`].
    cause: String,
}

/// One domain's request counters, by [`RequestCode`], and its limits.
pub struct DomainMetrics {
    name: String,
    requests: [Counter; 6],
    limits: RwLock<HashMap<String, Arc<LimitMetrics>>>,
}

/// One limit's decisions and hits, by [`LimitResult`].
pub struct LimitMetrics {
    decisions: [Counter; 4],
    hits: [Counter; 4],
}

impl LimitMetrics {
    /// Counts one decision of this limit for a request of `cost`.
    pub fn observe(&self, result: LimitResult, cost: u64) {
        let i = LimitResult::ALL
            .iter()
            .position(|r| *r == result)
            .unwrap_or(0);
        self.decisions[i].inc();
        self.hits[i].inc_by(cost);
    }
}

/// Every metric tollgate exports.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    limit_decisions: Family<LimitLabels, Counter>,
    limit_hits: Family<LimitLabels, Counter>,
    pub decision_duration: Histogram,
    /// `tollgate_store_duration_seconds` by [`StoreOp`], created up front.
    store_duration: [Histogram; 3],
    pub store_up: Gauge,
    /// 1 when a Redis primary's `maxmemory-policy` can evict live counters.
    pub store_eviction_risk: Gauge,
    /// Redis primaries with fewer replicas connected than `--redis-wait-replicas`.
    pub store_replicas_short: Gauge,
    /// Redis primaries found to have come back without their data.
    pub store_data_lost: Counter,
    pub ready: Gauge,
    config_reloads: Family<ResultLabels, Counter>,
    pub config_last_reload_success: Gauge<f64, AtomicU64>,
    /// 1 while the xDS config stream is open (`--config-xds`).
    pub xds_connected: Gauge,
    /// xDS responses refused (NACKed).
    pub xds_nacks: Counter,
    /// The running xDS config's version, as one series labelled with it.
    xds_version: Family<VersionLabels, Gauge>,
    pub local_cache_hits: Counter,
    pub global: crate::telemetry::global_metrics::GlobalMetrics,
    /// Answers held until they fit (`max_wait`), and for how long in all.
    pub held: Counter,
    pub held_seconds: Counter<f64, AtomicU64>,
    /// Requests that could have waited but found `--max-held` answers held already.
    pub held_full: Counter,
    store_failures: Family<PolicyLabels, Counter>,
    pub refunds: Counter,
    /// Counters an operator reset (`POST /counters/reset`).
    pub counter_resets: Counter,
    slot_ops: Family<SlotLabels, Counter>,
    reservations: Family<ResultLabels, Counter>,
    settles: Family<ResultLabels, Counter>,
    unpriced: Family<DomainLabels, Counter>,
    pub memory_evictions: Counter,
    pub lease_takes: Counter,
    pub lease_local: Counter,
    pub replica_reads: Counter,
    domains: RwLock<HashMap<String, Arc<DomainMetrics>>>,
    /// envoyproxy/ratelimit's statistics, served beside these (`--disable-stats`: `None`).
    pub statistics: Option<Arc<crate::telemetry::stats::registry::Statistics>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// Latency buckets from 50 µs to 2.5 s, with a bound at 20 ms: Envoy's default filter timeout.
const LATENCY_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.015, 0.02, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "tollgate_requests",
            "ShouldRateLimit requests, by domain and outcome (OK, OVER_LIMIT, INVALID, UNAVAILABLE, RESOURCE_EXHAUSTED, DISABLED)",
            requests.clone(),
        );
        let limit_decisions = Family::<LimitLabels, Counter>::default();
        registry.register(
            "tollgate_limit_decisions",
            "Per limit and request: over_limit, near_limit (above 80%), within_limit or shadow",
            limit_decisions.clone(),
        );
        let limit_hits = Family::<LimitLabels, Counter>::default();
        registry.register(
            "tollgate_limit_hits",
            "The cost (hits) of the decisions in tollgate_limit_decisions_total",
            limit_hits.clone(),
        );
        let decision_duration = latency_histogram();
        registry.register(
            "tollgate_decision_duration_seconds",
            "Time to answer one ShouldRateLimit request",
            decision_duration.clone(),
        );
        let store_duration =
            Family::<OpLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register(
            "tollgate_store_duration_seconds",
            "Redis round trips, by operation (decide, refund, probe)",
            store_duration.clone(),
        );
        let store_duration = [StoreOp::Decide, StoreOp::Refund, StoreOp::Probe].map(|op| {
            store_duration
                .get_or_create(&OpLabels {
                    op: op.label().into(),
                })
                .clone()
        });
        let store_up = Gauge::default();
        registry.register(
            "tollgate_store_up",
            "1 when the store answers (every Redis primary), else 0",
            store_up.clone(),
        );
        let store_eviction_risk = Gauge::default();
        registry.register(
            "tollgate_store_eviction_risk",
            "1 when a Redis primary's maxmemory-policy is not noeviction: live counters can be evicted (over-admission)",
            store_eviction_risk.clone(),
        );
        let store_replicas_short = Gauge::default();
        registry.register(
            "tollgate_store_replicas_short",
            "Redis primaries with fewer replicas connected than --redis-wait-replicas (decisions that charge there are answered by the failure policy)",
            store_replicas_short.clone(),
        );
        let store_data_lost = Counter::default();
        registry.register(
            "tollgate_store_data_lost",
            "Times a Redis primary came back without its data (tollgate's marker key gone: restarted without persistence, a failed sync, a flush); its counters restarted from zero",
            store_data_lost.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "tollgate_ready",
            "1 while readiness is SERVING",
            ready.clone(),
        );
        let config_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "tollgate_config_reloads",
            "Config reload attempts, by result (success, failure)",
            config_reloads.clone(),
        );
        let config_last_reload_success = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "tollgate_config_last_reload_success_timestamp_seconds",
            "When the running config was last loaded (Unix seconds)",
            config_last_reload_success.clone(),
        );
        let xds_connected = Gauge::default();
        registry.register(
            "tollgate_config_xds_connected",
            "1 while the xDS config stream to the control plane is open",
            xds_connected.clone(),
        );
        let xds_nacks = Counter::default();
        registry.register(
            "tollgate_config_xds_nacks",
            "xDS config responses refused (NACKed); the running config stayed",
            xds_nacks.clone(),
        );
        let xds_version = Family::<VersionLabels, Gauge>::default();
        registry.register(
            "tollgate_config_xds_version",
            "The running xDS config's version_info, as the label of a series set to 1",
            xds_version.clone(),
        );
        let global = crate::telemetry::global_metrics::GlobalMetrics::register(&mut registry);
        let local_cache_hits = Counter::default();
        registry.register(
            "tollgate_local_cache_hits",
            "Requests denied from the local over-limit cache, without Redis",
            local_cache_hits.clone(),
        );
        let held = Counter::default();
        registry.register(
            "tollgate_held",
            "Answers held until the request fits (max_wait on a token bucket)",
            held.clone(),
        );
        let held_seconds = Counter::<f64, AtomicU64>::default();
        registry.register(
            "tollgate_held_seconds",
            "Time answers were held in all (max_wait)",
            held_seconds.clone(),
        );
        let held_full = Counter::default();
        registry.register(
            "tollgate_held_full",
            "Requests that could have waited but were decided without waiting: --max-held answers were held already",
            held_full.clone(),
        );
        let store_failures = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "tollgate_store_failures",
            "Requests the store could not decide, by the failure policy that answered and the cause (timeout, refused, reset, tls, auth, dns, io, script, not_run, not_replicated; connection: every refused, reset, tls, auth, dns and io again, until the next release)",
            store_failures.clone(),
        );
        let refunds = Counter::default();
        registry.register(
            "tollgate_refunds",
            "Placement groups whose charges were refunded (a request denied elsewhere, or abandoned)",
            refunds.clone(),
        );
        let counter_resets = Counter::default();
        registry.register(
            "tollgate_counter_resets",
            "Counters an operator reset (POST /counters/reset on --admin-write-addr)",
            counter_resets.clone(),
        );
        let slot_ops = Family::<SlotLabels, Counter>::default();
        registry.register(
            "tollgate_slot_operations",
            "Concurrency slot releases and renewals, by whether the id held slots (held=false: never taken, already released or expired)",
            slot_ops.clone(),
        );
        let reservations = Family::<ResultLabels, Counter>::default();
        registry.register(
            "tollgate_reservations",
            "Reservations asked for, by result: reserved (charged up front under an id), refused (did not fit, nothing charged), no_estimate (no estimate and no reservations.default_estimate: refused)",
            reservations.clone(),
        );
        let settles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "tollgate_reservation_settles",
            "Settles, by result: settled (the reservation became the actual use), unknown (the id was settled already, or never issued: nothing changed)",
            settles.clone(),
        );
        let unpriced = Family::<DomainLabels, Counter>::default();
        registry.register(
            "tollgate_unpriced_requests",
            "Requests refused (OVER_LIMIT, nothing charged) because a spend limit's prices have no price for their model or token kind, by domain",
            unpriced.clone(),
        );
        let memory_evictions = Counter::default();
        registry.register(
            "tollgate_memory_evictions",
            "Live counters the memory store dropped to stay under --max-store-bytes (their usage is forgotten: possible over-admission)",
            memory_evictions.clone(),
        );
        let lease_takes = Counter::default();
        registry.register(
            "tollgate_lease_takes",
            "Script calls that took units of a shared limit for this instance's lease (lease: N)",
            lease_takes.clone(),
        );
        let lease_local = Counter::default();
        registry.register(
            "tollgate_lease_local_charges",
            "Charges of leased shared limits answered from this instance's lease, without Redis",
            lease_local.clone(),
        );
        let replica_reads = Counter::default();
        registry.register(
            "tollgate_replica_reads",
            "Requests that charged nothing, answered from Redis replicas (--read-replicas)",
            replica_reads.clone(),
        );
        // Every policy, cause and reload result shows from the start, at 0.
        for policy in ["error", "allow", "deny", "local"] {
            for cause in FAILURE_CAUSES.into_iter().chain([OLD_CONNECTION_CAUSE]) {
                drop(store_failures.get_or_create(&PolicyLabels {
                    policy: policy.into(),
                    cause: cause.into(),
                }));
            }
        }
        for result in ["success", "failure"] {
            drop(config_reloads.get_or_create(&ResultLabels {
                result: result.into(),
            }));
        }
        Metrics {
            registry,
            requests,
            limit_decisions,
            limit_hits,
            decision_duration,
            store_duration,
            store_up,
            store_eviction_risk,
            store_replicas_short,
            store_data_lost,
            ready,
            config_reloads,
            config_last_reload_success,
            xds_connected,
            xds_nacks,
            xds_version,
            local_cache_hits,
            global,
            held,
            held_seconds,
            held_full,
            store_failures,
            refunds,
            counter_resets,
            slot_ops,
            reservations,
            settles,
            unpriced,
            memory_evictions,
            lease_takes,
            lease_local,
            replica_reads,
            domains: RwLock::new(HashMap::new()),
            statistics: None,
        }
    }

    /// These metrics and envoyproxy/ratelimit's `statistics`.
    pub fn with_statistics(
        mut self,
        statistics: Arc<crate::telemetry::stats::registry::Statistics>,
    ) -> Metrics {
        self.statistics = Some(statistics);
        self
    }

    /// The counters of `domain` (a configured domain, or [`UNKNOWN_DOMAIN`]).
    pub fn domain(&self, domain: &str) -> Arc<DomainMetrics> {
        if let Some(d) = self.domains.read().get(domain) {
            return d.clone();
        }
        let mut domains = self.domains.write();
        domains
            .entry(domain.to_string())
            .or_insert_with(|| {
                let requests = RequestCode::ALL.map(|code| {
                    self.requests
                        .get_or_create(&RequestLabels {
                            domain: domain.into(),
                            code: code.label().into(),
                        })
                        .clone()
                });
                Arc::new(DomainMetrics {
                    name: domain.to_string(),
                    requests,
                    limits: RwLock::new(HashMap::new()),
                })
            })
            .clone()
    }

    /// The counters of `limit` (its name, its rule path, or `override`) in `domain`.
    pub fn limit(&self, domain: &DomainMetrics, limit: &str) -> Arc<LimitMetrics> {
        if let Some(l) = domain.limits.read().get(limit) {
            return l.clone();
        }
        let mut limits = domain.limits.write();
        limits
            .entry(limit.to_string())
            .or_insert_with(|| {
                let labels = |result: LimitResult| LimitLabels {
                    domain: domain.name.clone(),
                    limit: limit.into(),
                    result: result.label().into(),
                };
                Arc::new(LimitMetrics {
                    decisions: LimitResult::ALL
                        .map(|r| self.limit_decisions.get_or_create(&labels(r)).clone()),
                    hits: LimitResult::ALL
                        .map(|r| self.limit_hits.get_or_create(&labels(r)).clone()),
                })
            })
            .clone()
    }

    /// Counts a request's outcome for `domain`.
    pub fn request(&self, domain: &DomainMetrics, code: RequestCode) {
        let i = RequestCode::ALL
            .iter()
            .position(|c| *c == code)
            .unwrap_or(0);
        domain.requests[i].inc();
    }

    /// A release or renew (`op`) of a slot id that held slots on `limits` limits.
    pub fn slots(&self, op: &'static str, limits: u32) {
        let held = if limits > 0 { "true" } else { "false" };
        self.slot_ops.get_or_create(&SlotLabels { op, held }).inc();
    }

    /// A reservation's result: `reserved`, `refused` or `no_estimate`.
    pub fn reservation(&self, result: &'static str) {
        self.reservations
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    /// A settle's result: `settled` or `unknown`.
    pub fn settle(&self, result: &'static str) {
        self.settles
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    /// A request of `domain` refused for a model or token kind its prices do not price.
    pub fn unpriced(&self, domain: &str) {
        self.unpriced
            .get_or_create(&DomainLabels {
                domain: domain.into(),
            })
            .inc();
    }

    /// A Redis round trip of `op` that took `seconds`.
    pub fn store_duration(&self, op: StoreOp, seconds: f64) {
        let i = match op {
            StoreOp::Decide => 0,
            StoreOp::Refund => 1,
            StoreOp::Probe => 2,
        };
        self.store_duration[i].observe(seconds);
    }

    /// A request the failure policy `policy` answered, for `cause` (one of
    /// [`FAILURE_CAUSES`]). A connection's cause is counted under its old name too.
    pub fn store_failure(&self, policy: &str, cause: &str) {
        let count = |cause: &str| {
            self.store_failures
                .get_or_create(&PolicyLabels {
                    policy: policy.into(),
                    cause: cause.into(),
                })
                .inc();
        };
        count(cause);
        if CONNECTION_CAUSES.contains(&cause) {
            count(OLD_CONNECTION_CAUSE);
        }
    }

    /// A config reload attempt.
    pub fn config_reload(&self, success: bool) {
        if let Some(s) = &self.statistics {
            s.service(match success {
                true => crate::telemetry::stats::registry::ServiceEvent::ConfigLoadSuccess,
                false => crate::telemetry::stats::registry::ServiceEvent::ConfigLoadError,
            });
        }
        let result = if success { "success" } else { "failure" };
        self.config_reloads
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    /// The running xDS config's version: one series, whose label the control plane chose
    /// (one at a time, so cardinality stays 1).
    pub fn xds_version(&self, version: &str) {
        self.xds_version.clear();
        self.xds_version
            .get_or_create(&VersionLabels {
                version: version.to_string(),
            })
            .set(1);
    }

    /// OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// What `/metrics` serves and its content type: OpenMetrics without envoyproxy's
    /// statistics; with them, Prometheus text 0.0.4 (their counters keep statsd_exporter's
    /// names, without the `_total` OpenMetrics requires), tollgate's series first.
    pub fn exposition(&self) -> (&'static str, String) {
        let om = self.render();
        let Some(stats) = &self.statistics else {
            return (
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                om,
            );
        };
        let mut out = String::with_capacity(om.len() + 4096);
        crate::telemetry::stats::exposition::openmetrics_to_text(&om, &mut out);
        crate::telemetry::stats::exposition::render(stats, &mut out);
        ("text/plain; version=0.0.4; charset=utf-8", out)
    }
}
