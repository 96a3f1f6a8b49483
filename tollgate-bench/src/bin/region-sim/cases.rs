//! The cases `region-sim` runs: the issue-49 table, the failures, the bucket, and the grid of
//! windows, limits and round trips a global limit is (or is not) for.

use tollgate::algorithm::global::terms::{Kind, OnPartition};

use crate::{Case, Cost, Demand, Failure, Strategy, S};

/// Every case, in the order they print.
pub fn all() -> Vec<Case> {
    let five = vec![1, 20, 80, 150, 200];
    let three = vec![1, 60, 200];
    let mut cases = Vec::new();
    let windows = [(S, "1 s"), (60 * S, "60 s"), (3600 * S, "1 h")];
    let limits = [10u64, 1_000, 100_000];
    let demands = [
        Demand::Uniform,
        Demand::Skewed,
        Demand::Moving,
        Demand::Flash,
        Demand::Attacker,
    ];
    let safe = OnPartition::SafeShare(0.05);
    for &(window_us, wname) in &windows {
        for &limit in &limits {
            for &d in &demands {
                for strategy in [
                    Strategy::Leases,
                    Strategy::StaticSplit,
                    Strategy::Independent,
                    Strategy::SharedRedis,
                ] {
                    if strategy != Strategy::Leases
                        && !matches!(d, Demand::Uniform | Demand::Skewed)
                    {
                        continue;
                    }
                    cases.push(Case {
                        name: format!("window {limit}/{wname}, 5 regions, {d:?}, {strategy:?}"),
                        rtts_ms: five.clone(),
                        kind: Kind::Window {
                            limit,
                            window_us,
                            calendar: None,
                        },
                        on_partition: safe,
                        demand: d,
                        failure: Failure::None,
                        strategy,
                        cost: Cost::Unit,
                    });
                }
            }
        }
    }
    let failures = [
        Failure::Partition,
        Failure::Failover {
            lag_ms: 0,
            wait: true,
        },
        Failure::Failover {
            lag_ms: 500,
            wait: true,
        },
        Failure::Failover {
            lag_ms: 100,
            wait: false,
        },
        Failure::Failover {
            lag_ms: 500,
            wait: false,
        },
        Failure::InstanceDeath,
        Failure::Skew,
    ];
    for f in failures {
        for (kind, kname) in [
            (
                Kind::Window {
                    limit: 1_000,
                    window_us: 60 * S,
                    calendar: None,
                },
                "window 1000/60 s",
            ),
            (
                Kind::Window {
                    limit: 1_000,
                    window_us: S,
                    calendar: None,
                },
                "window 1000/1 s",
            ),
            (
                Kind::Bucket {
                    rate: 1_000.0,
                    burst: 1_000,
                },
                "bucket 1000/s burst 1000",
            ),
        ] {
            for on_partition in [safe, OnPartition::Refuse] {
                if on_partition == OnPartition::Refuse && !matches!(f, Failure::Partition) {
                    continue;
                }
                for strategy in [Strategy::Leases, Strategy::SharedRedis] {
                    if strategy == Strategy::SharedRedis && !matches!(f, Failure::Partition) {
                        continue;
                    }
                    cases.push(Case {
                        name: format!("{kname}, 3 regions, {f:?}, {on_partition:?}, {strategy:?}"),
                        rtts_ms: three.clone(),
                        kind,
                        on_partition,
                        demand: Demand::Uniform,
                        failure: f,
                        strategy,
                        cost: Cost::Unit,
                    });
                }
            }
        }
    }
    for &d in &demands {
        for strategy in [
            Strategy::Leases,
            Strategy::StaticSplit,
            Strategy::Independent,
        ] {
            cases.push(Case {
                name: format!("bucket 1000/s burst 1000, 5 regions, {d:?}, {strategy:?}"),
                rtts_ms: five.clone(),
                kind: Kind::Bucket {
                    rate: 1_000.0,
                    burst: 1_000,
                },
                on_partition: safe,
                demand: d,
                failure: Failure::None,
                strategy,
                cost: Cost::Unit,
            });
        }
    }
    cases.extend(grid());
    cases.extend(budgets());
    cases
}

/// Budgets: money (each request 1 to 2,000 µUSD) and reservations (100 reserved, settled at
/// 50 or 150 two seconds later: the excess lands past the lease, and home counts it), on
/// minute windows, five regions without failures and three with the farthest cut off.
fn budgets() -> Vec<Case> {
    let mut out = Vec::new();
    let costs = [
        (
            "money 10000000/60 s (1-2000 a request)",
            10_000_000,
            Cost::Money { max: 2_000 },
        ),
        (
            "reservations 100000/60 s (100 reserved, 50 or 150 used)",
            100_000,
            Cost::Reserve {
                estimate: 100,
                after_ms: 2_000,
            },
        ),
    ];
    for (name, limit, cost) in costs {
        let kind = Kind::Window {
            limit,
            window_us: 60 * S,
            calendar: None,
        };
        for d in [Demand::Uniform, Demand::Skewed] {
            out.push(Case {
                name: format!("{name}, 5 regions, {d:?}, Leases"),
                rtts_ms: vec![1, 20, 80, 150, 200],
                kind,
                on_partition: OnPartition::SafeShare(0.05),
                demand: d,
                failure: Failure::None,
                strategy: Strategy::Leases,
                cost,
            });
        }
        out.push(Case {
            name: format!("{name}, 3 regions, Partition, SafeShare(0.05), Leases"),
            rtts_ms: vec![1, 60, 200],
            kind,
            on_partition: OnPartition::SafeShare(0.05),
            demand: Demand::Uniform,
            failure: Failure::Partition,
            strategy: Strategy::Leases,
            cost,
        });
    }
    out
}

/// Where leases meet the targets and where they do not: five regions up to 200 ms from home,
/// windows of 1 to 30 s, limits of 10 to 1,000, uniform and skewed demand (`region-sim grid`).
fn grid() -> Vec<Case> {
    let mut out = Vec::new();
    for window_s in [1u64, 2, 5, 10, 30] {
        for limit in [10u64, 25, 50, 100, 1_000] {
            for d in [Demand::Uniform, Demand::Skewed] {
                out.push(Case {
                    name: format!(
                        "grid: window {limit}/{window_s} s, 5 regions up to 200 ms, {d:?}"
                    ),
                    rtts_ms: vec![1, 20, 80, 150, 200],
                    kind: Kind::Window {
                        limit,
                        window_us: window_s * S,
                        calendar: None,
                    },
                    on_partition: OnPartition::SafeShare(0.05),
                    demand: d,
                    failure: Failure::None,
                    strategy: Strategy::Leases,
                    cost: Cost::Unit,
                });
            }
        }
    }
    out
}
