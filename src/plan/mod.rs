//! Planning: `(Config, request) -> Plan`, pure and allocation-light.
//!
//! For each descriptor of the request, walk the domain's match tree as envoyproxy/ratelimit
//! does (exact beats wildcard beats key-only; no backtracking; a limit applies only at the
//! request's exact depth), add the limits of `hierarchical` rules passed on the way, apply a
//! `limit` override and `replaces`, and emit one [`PlannedCharge`] per limit: its counter key, the
//! limit, the cost, and its role in the decision.
//!
//! Counter keys and their hash tags are built in [`key`].

pub mod counter_key;

use std::borrow::Cow;
use std::ops::Range;

use counter_key::counter_key;
use counter_key::tag_of;

use crate::algorithm::concurrency::SlotId;
use crate::algorithm::rule::Role;
use crate::config::{Config, Pattern, Rule};
use crate::limit::money::{self, Prices, Unpriced};
use crate::limit::unit::Unit;
use crate::limit::Limit;
use crate::limit::{Class, FairShare, Shares, ACTIVE_MARK, CLASS_MARK, TENANT_MARK};
use crate::pb::common::RateLimitDescriptor;
use crate::pb::rls::RateLimitRequest;
use crate::telemetry::stats::name::StatsBinding;

/// Everything a request will charge, and how each descriptor is answered.
#[derive(Debug)]
pub struct Plan<'c> {
    pub descriptors: Vec<DescriptorPlan<'c>>,
    pub charges: Vec<PlannedCharge<'c>>,
    /// Descriptors whose matched rule has `quota_mode`, charged or not (see
    /// [`crate::algorithm::rule::verdict`]).
    pub quota_descriptors: usize,
    /// The id of the concurrency slots the request takes, releases or renews (`(0, 0)`: none;
    /// see [`crate::algorithm::concurrency`]).
    pub slot: SlotId,
    /// Descriptors that reach a `spend` limit but whose model (or token kind) the domain's
    /// prices do not price: the request is refused and charges nothing.
    pub unpriced: Vec<usize>,
    /// When the store's answer is due: the caller's `grpc-timeout` less the answer's way back
    /// (`crate::service::hold::due`). `None`: the caller set no deadline; a store then takes
    /// its own (`--redis-timeout`), which also caps this.
    pub due: Option<tokio::time::Instant>,
}

impl Plan<'_> {
    /// `n` descriptors, none limited: every one is answered OK without a limit (an unknown
    /// or disabled domain).
    pub fn no_limits(n: usize) -> Plan<'static> {
        Plan {
            descriptors: vec![
                DescriptorPlan {
                    kind: DescriptorKind::NoLimit,
                    charges: 0..0,
                    quota: false,
                    metadata: None,
                };
                n
            ],
            charges: Vec::new(),
            quota_descriptors: 0,
            slot: (0, 0),
            unpriced: Vec::new(),
            due: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescriptorKind {
    /// Nothing in the config applies: OK without a limit.
    NoLimit,
    /// `unlimited: true`: OK, remaining u32::MAX.
    Unlimited,
    /// Answered from its charges.
    Limited,
}

#[derive(Debug, Clone)]
pub struct DescriptorPlan<'c> {
    pub kind: DescriptorKind,
    /// This descriptor's charges in `Plan::charges`.
    pub charges: Range<usize>,
    /// `quota_mode` on the matched rule.
    pub quota: bool,
    /// The matched rule's `metadata`.
    pub metadata: Option<&'c serde_json::Map<String, serde_json::Value>>,
}

/// A charge as planned (first stage; a store places it as a `store::placement::PlacedCharge`):
/// one limit charged by one descriptor, its counter key without a store prefix.
#[derive(Debug, Clone)]
pub struct PlannedCharge<'c> {
    pub descriptor: usize,
    pub limit: Cow<'c, Limit>,
    /// The envoyproxy/ratelimit statistics of the rule that owns the limit (`None` for an
    /// override, or without statistics).
    pub stats: Option<&'c StatsBinding>,
    /// The counter key, `{tag}rest`, without any store prefix.
    pub key: String,
    pub cost: u64,
    pub role: Role,
}

impl PlannedCharge<'_> {
    /// The hash tag (between the leading braces): keys with one tag share a Redis hash slot.
    pub fn tag(&self) -> &str {
        tag_of(&self.key)
    }
}

/// A request the plan cannot be built for (the caller's fault: `INVALID_ARGUMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("descriptor {descriptor}: hits {hits} is more than domain '{domain}' allows (max_hits: {max})")]
    OverMaxHits {
        descriptor: usize,
        hits: u64,
        domain: String,
        max: u64,
    },
    /// The override's unit as the request numbers it (0 is `UNKNOWN`).
    #[error(
        "descriptor {descriptor}: limit override has unit {}; expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR",
        if *.unit == 0 { "UNKNOWN".to_string() } else { .unit.to_string() }
    )]
    OverrideUnit { descriptor: usize, unit: i32 },
    #[error("descriptor {descriptor}: limit override must have requests_per_unit of at least 1")]
    OverrideZero { descriptor: usize },
}

/// The tenant of a pool's fair share a descriptor names.
fn tenant_of<'d>(fair: &FairShare, d: &'d RateLimitDescriptor) -> &'d str {
    fair.tenant_of(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
}

/// The class of a pool's shares a descriptor names.
fn class_of<'s>(shares: &'s Shares, d: &RateLimitDescriptor) -> &'s Class {
    shares.class_of(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
}

/// A limit found for a descriptor before `replaces` is applied.
struct Candidate<'c> {
    descriptor: usize,
    limit: Cow<'c, Limit>,
    stats: Option<&'c StatsBinding>,
    /// Depth of the rule that owns the limit: its key covers entries `0..=depth`.
    depth: usize,
    role: Role,
}

/// Rule `r`'s limits (at `depth` of descriptor `i`'s path) as candidates, and what they replace.
fn add_limits<'c>(
    candidates: &mut Vec<Candidate<'c>>,
    replaced: &mut Vec<&'c str>,
    i: usize,
    depth: usize,
    r: &'c Rule,
    role: Role,
) {
    for limit in &r.limits {
        replaced.extend(limit.replaces.iter().map(String::as_str));
        candidates.push(Candidate {
            descriptor: i,
            limit: Cow::Borrowed(limit.as_ref()),
            stats: r.stats.as_deref(),
            depth,
            role,
        });
    }
}

pub fn plan<'c>(config: &'c Config, req: &RateLimitRequest) -> Result<Plan<'c>, PlanError> {
    let n = req.descriptors.len();
    let Some(domain) = config.domains.get(&req.domain) else {
        return Ok(Plan::no_limits(n));
    };
    let mut descriptors = Vec::with_capacity(n);

    let cost_of = |i: usize| match req.descriptors[i].hits_addend {
        Some(h) => h,
        None => u64::from(req.hits_addend.max(1)),
    };
    if let Some(max) = domain.policy.max_hits {
        if let Some(i) = (0..n).find(|&i| cost_of(i) > max) {
            return Err(PlanError::OverMaxHits {
                descriptor: i,
                hits: cost_of(i),
                domain: domain.name.clone(),
                max,
            });
        }
    }
    let mut paths: Vec<Vec<&'c Rule>> = Vec::with_capacity(n);
    let mut candidates: Vec<Candidate<'c>> = Vec::new();
    let mut replaced: Vec<&'c str> = Vec::new();
    for (i, d) in req.descriptors.iter().enumerate() {
        let path = match_path(&domain.root, d);
        let matched = !d.entries.is_empty() && path.len() == d.entries.len();
        let rule = if matched { path.last().copied() } else { None };
        let quota = rule.is_some_and(|r| r.quota_mode);
        let role_of = |r: &Rule| match (r.shadow_mode, quota) {
            (true, _) => Role::Shadow,
            (false, true) => Role::Quota {
                descriptor: i as u32,
            },
            (false, false) => Role::Enforced,
        };
        // `allow_overrides: false`: the configured limits apply whatever the caller sends.
        let limit_override = d.limit.as_ref().filter(|_| domain.policy.allow_overrides);
        let kind = if let Some(ov) = limit_override {
            let unit = check_override(i, ov.requests_per_unit, ov.unit)?;
            candidates.push(Candidate {
                descriptor: i,
                limit: Cow::Owned(Limit::from_override(
                    ov.requests_per_unit,
                    unit,
                    domain.policy.usage,
                )),
                stats: None,
                depth: d.entries.len().saturating_sub(1),
                // The override replaces the rule's limits, not its quota mode.
                role: if quota {
                    Role::Quota {
                        descriptor: i as u32,
                    }
                } else {
                    Role::Enforced
                },
            });
            // Only the matched rule's own limits: a hierarchical rule passed through on the way
            // (a tenant's, a limit shared by every tenant) still applies.
            for (depth, r) in path.iter().enumerate() {
                if depth + 1 < d.entries.len() && r.hierarchical {
                    add_limits(&mut candidates, &mut replaced, i, depth, r, role_of(r));
                }
            }
            DescriptorKind::Limited
        } else if let Some(r) = rule.filter(|r| r.unlimited) {
            replaced.extend(r.unlimited_replaces.iter().map(String::as_str));
            DescriptorKind::Unlimited
        } else {
            let before = candidates.len();
            for (depth, r) in path.iter().enumerate() {
                // The matched rule's limits, plus those of hierarchical rules passed through.
                if depth + 1 == d.entries.len() || r.hierarchical {
                    add_limits(&mut candidates, &mut replaced, i, depth, r, role_of(r));
                }
            }
            if candidates.len() > before {
                DescriptorKind::Limited
            } else {
                DescriptorKind::NoLimit
            }
        };
        descriptors.push(DescriptorPlan {
            kind,
            charges: 0..0,
            quota,
            metadata: rule.and_then(|r| r.metadata.as_ref()),
        });
        paths.push(path);
    }

    candidates.retain(|c| c.limit.name.is_empty() || !replaced.contains(&c.limit.name.as_str()));
    let tag_depths: Vec<usize> = (0..n)
        .map(|i| tag_depth(&paths[i], candidates.iter().filter(|c| c.descriptor == i)))
        .collect();
    let mut charges = Vec::with_capacity(candidates.len());
    let mut unpriced = Vec::new();
    for c in candidates {
        let d = &req.descriptors[c.descriptor];
        let path = &paths[c.descriptor];
        let key = counter_key(
            &domain.name,
            d,
            path,
            c.depth,
            tag_depths[c.descriptor],
            &c.limit,
        );
        let range = &mut descriptors[c.descriptor].charges;
        if range.start == range.end {
            *range = charges.len()..charges.len();
        }
        range.end += 1;
        let mut cost = cost_of(c.descriptor);
        // A check (cost 0) costs nothing in any money; it still refuses a model the prices
        // do not know, so a call is refused before it runs rather than after. A check that
        // names no model (a budget's remaining) needs no price.
        if c.limit.spend && (cost > 0 || domain.prices.as_ref().is_some_and(|p| names_model(p, d)))
        {
            match domain.prices.as_ref().map(|p| priced(p, d, cost)) {
                // Past the most a counter can hold nothing changes (a charge that large never
                // fits, and overdraft stops at the cap): clamped there, the script's numbers
                // stay exact (spend × 101 < 2^53).
                Some(Ok(money)) if money > 0 => {
                    cost = money.min(c.limit.params.usage_cap().max(1));
                }
                Some(Ok(_)) => cost = 0,
                _ => {
                    if !unpriced.contains(&c.descriptor) {
                        unpriced.push(c.descriptor);
                    }
                    cost = 0;
                }
            }
        }
        // A pool with shares: the request's class is charged beside it, on a key in its slot.
        let class = match &c.limit {
            Cow::Borrowed(l) => l
                .shares
                .as_deref()
                .map(|sh| Cow::Borrowed(&class_of(sh, d).limit)),
            Cow::Owned(l) => l
                .shares
                .as_deref()
                .map(|sh| Cow::Owned(class_of(sh, d).limit.clone())),
        };
        // A pool with a fair share: the request's tenant and the pool's active tenants are
        // charged beside it (the active count right after the tenant, as the batch expects),
        // on keys in its slot.
        let fair = match &c.limit {
            Cow::Borrowed(l) => l.fair_share.as_deref().map(|f| {
                (
                    Cow::Borrowed(&f.tenant),
                    Cow::Borrowed(&f.active),
                    tenant_of(f, d),
                )
            }),
            Cow::Owned(l) => l.fair_share.as_deref().map(|f| {
                (
                    Cow::Owned(f.tenant.clone()),
                    Cow::Owned(f.active.clone()),
                    tenant_of(f, d),
                )
            }),
        };
        let fair = fair.map(|(tenant, active, name)| {
            [
                PlannedCharge {
                    descriptor: c.descriptor,
                    cost,
                    key: format!("{key}{TENANT_MARK}{name}"),
                    limit: tenant,
                    stats: None,
                    role: c.role,
                },
                PlannedCharge {
                    descriptor: c.descriptor,
                    cost: 0,
                    key: format!("{key}{ACTIVE_MARK}"),
                    limit: active,
                    stats: None,
                    role: Role::Shadow,
                },
            ]
        });
        let class = class.map(|limit| PlannedCharge {
            descriptor: c.descriptor,
            cost,
            key: format!(
                "{key}{CLASS_MARK}{}",
                limit.key_suffix.rsplit(CLASS_MARK).next().unwrap_or("")
            ),
            limit,
            stats: None,
            role: c.role,
        });
        charges.push(PlannedCharge {
            descriptor: c.descriptor,
            cost,
            limit: c.limit,
            stats: c.stats,
            key,
            role: c.role,
        });
        if let Some(class) = class {
            descriptors[class.descriptor].charges.end += 1;
            charges.push(class);
        }
        if let Some(fair) = fair {
            descriptors[c.descriptor].charges.end += 2;
            charges.extend(fair);
        }
    }
    for dp in &mut descriptors {
        if dp.kind == DescriptorKind::Limited && dp.charges.is_empty() {
            dp.kind = DescriptorKind::NoLimit;
        }
    }
    let quota_descriptors = descriptors.iter().filter(|d| d.quota).count();
    Ok(Plan {
        descriptors,
        charges,
        quota_descriptors,
        slot: (0, 0),
        unpriced,
        due: None,
    })
}

/// Whether `d` has an entry naming a model.
fn names_model(prices: &Prices, d: &RateLimitDescriptor) -> bool {
    d.entries.iter().any(|e| e.key == prices.model_key)
}

/// What `tokens` of descriptor `d` cost in micro-units: its model and token kind (default
/// `output`) are its entries keyed by the table's `model_key` and `kind_key`.
fn priced(prices: &Prices, d: &RateLimitDescriptor, tokens: u64) -> Result<u64, Unpriced> {
    let entry = |key: &str| {
        d.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.as_str())
    };
    let per_million = prices.per_million(entry(&prices.model_key), entry(&prices.kind_key))?;
    Ok(money::cost(tokens, per_million))
}

/// How many leading entries (`0..=depth`) a descriptor's hash tag covers: down to the first
/// level whose rule gives every value a counter of its own (a key-only or wildcard rule, not
/// `share_threshold`), so a constant first entry (`tier=free`, `generic_key=api`) does not put
/// every tenant or address on one Redis hash slot; but never deeper than the shallowest counter the
/// descriptor charges (`shared` ones aside, they have tags of their own), so all of one
/// descriptor's counters still share a hash slot and one script decides them atomically.
fn tag_depth<'a, 'c: 'a>(
    path: &[&Rule],
    charges: impl Iterator<Item = &'a Candidate<'c>>,
) -> usize {
    let per_value = path.iter().position(|r| {
        !r.share_threshold && matches!(r.pattern, Pattern::Any | Pattern::Wildcard(_))
    });
    let shallowest = charges.filter(|c| !c.limit.shared).map(|c| c.depth).min();
    per_value
        .unwrap_or(usize::MAX)
        .min(shallowest.unwrap_or(usize::MAX))
        .min(path.len().saturating_sub(1))
}

/// The rules matched level by level, stopping at the first entry with no rule or at a
/// rule without children (envoyproxy/ratelimit never backtracks).
fn match_path<'c>(root: &'c crate::config::Level, d: &RateLimitDescriptor) -> Vec<&'c Rule> {
    let mut path = Vec::with_capacity(d.entries.len());
    let mut level = root;
    for e in &d.entries {
        let Some(rule) = level.lookup(&e.key, &e.value) else {
            break;
        };
        path.push(rule);
        level = &rule.children;
        if level.is_empty() {
            break;
        }
    }
    path
}

fn check_override(descriptor: usize, requests_per_unit: u32, unit: i32) -> Result<Unit, PlanError> {
    let Some(unit) = Unit::from_proto(unit) else {
        return Err(PlanError::OverrideUnit { descriptor, unit });
    };
    if requests_per_unit == 0 {
        return Err(PlanError::OverrideZero { descriptor });
    }
    Ok(unit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::{compile_sources, LoadOptions};
    use crate::pb::common::rate_limit_descriptor::Entry;

    const TIERS: &str = "\
domain: llm
descriptors:
  - key: tier
    value: free
    descriptors:
      - key: tenant
        hierarchical: true
        rate_limit: {name: tenant, unit: minute, requests_per_unit: 100}
        descriptors:
          - key: model
            rate_limit: {name: model, unit: minute, requests_per_unit: 10}
  - key: tier
    value: pro
    hierarchical: true
    rate_limit: {name: tier, unit: minute, requests_per_unit: 1000}
    descriptors:
      - key: tenant
        rate_limit: {name: tenant, unit: minute, requests_per_unit: 100}
  - key: tenant
    rate_limits:
      - {name: tenant, unit: minute, requests_per_unit: 100}
      - {name: global, unit: minute, requests_per_unit: 5000, shared: true}
  - key: ip
    value: '10.*'
    share_threshold: true
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 10}
";

    fn tags(descriptors: &[&[(&str, &str)]]) -> Vec<String> {
        let config = compile_sources(&[("t.yaml".into(), TIERS.into())], &LoadOptions::default())
            .expect("config compiles");
        let req = RateLimitRequest {
            domain: "llm".into(),
            descriptors: descriptors
                .iter()
                .map(|entries| RateLimitDescriptor {
                    entries: entries
                        .iter()
                        .map(|(k, v)| Entry {
                            key: k.to_string(),
                            value: v.to_string(),
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            hits_addend: 0,
        };
        let plan = plan(&config, &req).expect("plans");
        plan.charges.iter().map(|c| c.tag().to_string()).collect()
    }

    #[test]
    fn a_constant_first_entry_does_not_put_every_tenant_on_one_hash_slot() {
        let a = tags(&[&[("tier", "free"), ("tenant", "a"), ("model", "gpt")]]);
        let b = tags(&[&[("tier", "free"), ("tenant", "b"), ("model", "gpt")]]);
        // Both charges of a descriptor (tenant, model) share the tenant's tag: one script.
        assert_eq!(a, ["llm|tier=free|tenant=a", "llm|tier=free|tenant=a"]);
        assert_eq!(b, ["llm|tier=free|tenant=b", "llm|tier=free|tenant=b"]);
    }

    #[test]
    fn a_counter_owned_by_the_constant_level_keeps_the_descriptor_on_its_slot() {
        // `tier=pro` has a counter of its own (shared by its tenants): atomicity first.
        let t = tags(&[&[("tier", "pro"), ("tenant", "a")]]);
        assert_eq!(t, ["llm|tier=pro", "llm|tier=pro"]);
    }

    #[test]
    fn a_per_value_first_entry_is_the_tag_as_before_and_shared_limits_have_their_own() {
        let t = tags(&[&[("tenant", "a")]]);
        assert_eq!(t, ["llm|tenant=a", "llm|tenant=*|*"]);
    }

    #[test]
    fn a_share_threshold_level_is_a_constant_not_a_per_value_level() {
        let a = tags(&[&[("ip", "10.1.2.3"), ("path", "/x")]]);
        let b = tags(&[&[("ip", "10.9.9.9"), ("path", "/y")]]);
        assert_eq!(a, ["llm|ip=10.*|path=/x"]);
        assert_eq!(b, ["llm|ip=10.*|path=/y"]);
    }
}
