//! Metrics of global limits (docs/multi-region.md), by the limit's label: what home granted
//! this region, how its refills went, and the safe share it took while cut off.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GlobalLabels {
    limit: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefillLabels {
    limit: String,
    outcome: String,
}

/// The metrics of this region's global limits.
pub struct GlobalMetrics {
    grants: Family<GlobalLabels, Counter>,
    units: Family<GlobalLabels, Counter>,
    refills: Family<RefillLabels, Counter>,
    safe: Family<GlobalLabels, Counter>,
    given_back: Family<GlobalLabels, Counter>,
}

impl GlobalMetrics {
    pub fn register(registry: &mut Registry) -> GlobalMetrics {
        let m = GlobalMetrics {
            grants: Family::default(),
            units: Family::default(),
            refills: Family::default(),
            safe: Family::default(),
            given_back: Family::default(),
        };
        registry.register(
            "tollgate_global_grants",
            "Grants of units this region's refill task got from a global limit's authority",
            m.grants.clone(),
        );
        registry.register(
            "tollgate_global_units_granted",
            "Units of a global limit granted to this region",
            m.units.clone(),
        );
        registry.register(
            "tollgate_global_refills",
            "Answers to this region's asks: granted, empty (nothing granted, a heartbeat's too) or failed",
            m.refills.clone(),
        );
        registry.register(
            "tollgate_global_safe_share_units",
            "Units of a global limit's safe share this region took while cut off from home",
            m.safe.clone(),
        );
        registry.register(
            "tollgate_global_given_back_units",
            "Units of a global limit this region gave back to home once its window was short",
            m.given_back.clone(),
        );
        m
    }

    fn labels(limit: &str) -> GlobalLabels {
        GlobalLabels {
            limit: limit.to_string(),
        }
    }

    pub fn granted(&self, limit: &str, units: u64) {
        self.grants.get_or_create(&Self::labels(limit)).inc();
        self.units.get_or_create(&Self::labels(limit)).inc_by(units);
    }

    pub fn refill(&self, limit: &str, outcome: &str) {
        let l = RefillLabels {
            limit: limit.to_string(),
            outcome: outcome.to_string(),
        };
        self.refills.get_or_create(&l).inc();
    }

    pub fn given_back(&self, limit: &str, units: u64) {
        self.given_back
            .get_or_create(&Self::labels(limit))
            .inc_by(units);
    }

    pub fn safe_share(&self, limit: &str, units: u64) {
        self.safe.get_or_create(&Self::labels(limit)).inc_by(units);
    }
}
