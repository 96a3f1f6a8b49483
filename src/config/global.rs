//! `global:` on a limit (docs/multi-region.md): the limit is one across regions, its
//! authority in the home region's Redis. Checked as the file is read (so an error names its
//! line), compiled into [`AcrossRegions`]; whether this instance's region shares it is checked
//! once the file is compiled ([`check_region`]), against `--region`.

use serde::Deserialize;

use crate::config::error::{LimitError, RuleError};
use crate::config::Domain;
use crate::limit::regions::AcrossRegions;
use crate::limit::Algorithm;

/// `global:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGlobal {
    pub home: String,
    pub regions: Vec<String>,
    /// `refuse` (the default) or `safe_share`.
    #[serde(default)]
    pub on_partition: Option<String>,
    #[serde(default)]
    pub safe_share: Option<f64>,
}

/// The most regions one limit may be shared by.
pub const MAX_REGIONS: usize = 64;

/// A region's name: 1 to 64 of `A-Z a-z 0-9 _ - .`.
pub fn valid_region(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The fields of `global:` against each other and against the limit's.
/// `with`: the limit's other keys a global limit cannot have, each set or not.
pub(super) fn check_global(
    g: &RawGlobal,
    algorithm: Algorithm,
    with: &[(bool, &'static str)],
) -> Result<(), LimitError> {
    if algorithm == Algorithm::SlidingWindow {
        return Err(LimitError::GlobalSliding);
    }
    if algorithm != Algorithm::FixedWindow {
        return Err(LimitError::GlobalAlgorithm(algorithm.name()));
    }
    if let Some((_, what)) = with.iter().find(|(set, _)| *set) {
        return Err(LimitError::GlobalWith(what));
    }
    if let Some(bad) = std::iter::once(&g.home)
        .chain(&g.regions)
        .find(|r| !valid_region(r))
    {
        return Err(LimitError::GlobalRegionName(bad.clone()));
    }
    if g.regions.is_empty() || g.regions.len() > MAX_REGIONS {
        return Err(LimitError::GlobalRegions(g.regions.len()));
    }
    if let Some(dup) = g
        .regions
        .iter()
        .enumerate()
        .find(|(i, r)| g.regions[..*i].contains(r))
    {
        return Err(LimitError::GlobalRegionTwice(dup.1.clone()));
    }
    if !g.regions.contains(&g.home) {
        return Err(LimitError::GlobalHomeNotListed(g.home.clone()));
    }
    match (g.on_partition.as_deref(), g.safe_share) {
        (None | Some("refuse"), None) => Ok(()),
        (None | Some("refuse"), Some(_)) => Err(LimitError::GlobalSafeShareWithRefuse),
        (Some("safe_share"), Some(s)) if s > 0.0 && s <= 0.5 => Ok(()),
        (Some("safe_share"), Some(s)) => Err(LimitError::GlobalSafeShare(s.to_string())),
        (Some("safe_share"), None) => Err(LimitError::GlobalSafeShare("nothing".into())),
        (Some(other), _) => Err(LimitError::GlobalOnPartition(other.to_string())),
    }
}

/// `global:` compiled; `id` names the limit (`domain.key_value|suffix`).
pub(super) fn compile_global(g: RawGlobal, id: String) -> AcrossRegions {
    AcrossRegions {
        id,
        home: g.home,
        regions: g.regions,
        safe_share: match g.on_partition.as_deref() {
            Some("safe_share") => g.safe_share,
            _ => None,
        },
    }
}

/// Which regions a config is checked for ([`check_region`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RegionCheck {
    /// No region (`serve` without `--region`): a global limit is refused.
    #[default]
    None,
    /// This instance's region (`--region`), and the regions whose Redis it can reach (its own
    /// and each `--region-redis`; `None`: not known, as in `check-config --region`).
    One {
        region: String,
        reachable: Option<Vec<String>>,
    },
    /// Every region the file's global limits name (`check-config` without `--region`: a
    /// config shared by all regions is checked for each of them).
    EveryNamed,
}

/// Every global limit of `domain` shared by the region(s) `check` names: without a region,
/// or with one a limit does not list, the file is refused; so is a limit homed in a region
/// whose Redis this instance cannot reach (no `--region-redis` for it).
pub fn check_region(domain: &Domain, check: &RegionCheck) -> Result<(), RuleError> {
    match check {
        RegionCheck::None => check_one(domain, None, None),
        RegionCheck::One { region, reachable } => {
            check_one(domain, Some(region), reachable.as_deref())
        }
        RegionCheck::EveryNamed => {
            let mut named: Vec<String> = Vec::new();
            domain.root.each_limit(&mut |l| {
                for r in l.global.iter().flat_map(|g| &g.regions) {
                    if !named.contains(r) {
                        named.push(r.clone());
                    }
                }
            });
            named
                .iter()
                .try_for_each(|r| check_one(domain, Some(r), None))
        }
    }
}

fn check_one(
    domain: &Domain,
    region: Option<&str>,
    reachable: Option<&[String]>,
) -> Result<(), RuleError> {
    let mut out = Ok(());
    domain.root.each_rule(&mut |rule| {
        for g in rule.limits.iter().filter_map(|l| l.global.as_ref()) {
            if out.is_err() {
                return;
            }
            let problem = match region {
                None => LimitError::GlobalWithoutRegion(g.id.clone()),
                Some(r) if g.index_of(r).is_none() => LimitError::GlobalNotListed {
                    id: g.id.clone(),
                    region: r.to_string(),
                },
                Some(_) if reachable.is_some_and(|homes| !homes.contains(&g.home)) => {
                    LimitError::GlobalHomeUnreachable {
                        id: g.id.clone(),
                        home: g.home.clone(),
                    }
                }
                Some(_) => continue,
            };
            out = Err(RuleError::Limit {
                full_key: rule.full_key.clone(),
                problem,
            });
        }
    });
    out
}
