//! The soak's faults, one a period, in turn: what each does to region us's cluster (or to the
//! instances' config), and how the fleet is made whole after it.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::fleet::{soak_yaml, xds_config, Fleet};
use crate::support::kit::blocking;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A primary SIGKILLed; once its replica is promoted, it comes back as a replica.
    KillPrimary,
    /// A primary cut off from the other five nodes by iptables for 7 s (tollgate still
    /// reaches it): its replica is promoted on the other side.
    PartitionPrimary,
    /// A primary SIGSTOPped for 3 s: past every deadline and past the node timeout.
    PausePrimary,
    /// A primary killed and started again at once, without its data (no persistence), before
    /// its replica could be promoted: every key it held starts over.
    RestartEmpty,
    /// The config files of A, B and C rewritten (a new limit beside the same ones): reloaded.
    ConfigReload,
    /// A new xDS snapshot (a new limit beside the same one): X applies and ACKs it.
    XdsUpdate,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::KillPrimary,
        Fault::PartitionPrimary,
        Fault::PausePrimary,
        Fault::RestartEmpty,
        Fault::ConfigReload,
        Fault::XdsUpdate,
    ];

    /// The faults `names` lists (a comma-separated list of each one's `word`), all when `None`.
    /// Panics on an unknown name, listing the known ones.
    pub fn chosen(names: Option<&str>) -> &'static [Fault] {
        let Some(names) = names.filter(|n| !n.trim().is_empty()) else {
            return &Fault::ALL;
        };
        let picked: Vec<Fault> = names
            .split(',')
            .map(|n| {
                Fault::ALL
                    .into_iter()
                    .find(|f| f.word() == n.trim())
                    .unwrap_or_else(|| {
                        let known: Vec<&str> = Fault::ALL.iter().map(|f| f.word()).collect();
                        panic!("TOLLGATE_SOAK_FAULTS: no fault {n:?} (known: {known:?})")
                    })
            })
            .collect();
        Vec::leak(picked)
    }

    /// The fault's one word in `TOLLGATE_SOAK_FAULTS`.
    pub fn word(self) -> &'static str {
        match self {
            Fault::KillPrimary => "killed",
            Fault::PartitionPrimary => "partitioned",
            Fault::PausePrimary => "paused",
            Fault::RestartEmpty => "restarted",
            Fault::ConfigReload => "reload",
            Fault::XdsUpdate => "xds",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::KillPrimary => "primary killed",
            Fault::PartitionPrimary => "primary partitioned",
            Fault::PausePrimary => "primary paused 3 s",
            Fault::RestartEmpty => "primary restarted empty",
            Fault::ConfigReload => "config reload",
            Fault::XdsUpdate => "xDS update",
        }
    }
}

/// Where the fault struck, for the table, and a promise the fault itself broke (X did not
/// ACK an xDS update): recorded with the period's violations so the run goes on.
pub struct Struck {
    pub what: String,
    pub broke: Option<String>,
}

fn victim(fleet: &mut Fleet) -> Ipv4Addr {
    let primaries = blocking(|| fleet.primaries());
    let v = primaries[fleet.next_victim % primaries.len()];
    fleet.next_victim += 1;
    v
}

/// Strikes `fault` and undoes what must be undone within the period (a node restarted, a cut
/// healed, a pause ended).
pub async fn strike(fleet: &mut Fleet, fault: Fault) -> Struck {
    let what = match fault {
        Fault::KillPrimary => {
            let v = victim(fleet);
            let killed = std::time::Instant::now();
            blocking(|| fleet.cluster.kill(v));
            // Started again before its replica took over, it would be a primary that lost
            // its data (the next fault), not a failover.
            let mut promoted = false;
            while !promoted && killed.elapsed() < Duration::from_secs(20) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let primaries = blocking(|| fleet.primaries());
                promoted = primaries.len() == 3 && !primaries.contains(&v);
            }
            let took = killed.elapsed();
            blocking(|| {
                fleet.cluster.restart(v);
                fleet.cluster.cli(v, &["CONFIG", "SET", "hz", "100"]);
            });
            format!(
                "killed {v}, its replica promoted after {:.1} s",
                took.as_secs_f64()
            )
        }
        Fault::PartitionPrimary => {
            let v = victim(fleet);
            let others: Vec<Ipv4Addr> = fleet
                .cluster
                .addrs()
                .into_iter()
                .filter(|a| *a != v)
                .collect();
            blocking(|| fleet.netcut.cut(v, &others));
            tokio::time::sleep(Duration::from_secs(7)).await;
            blocking(|| fleet.netcut.heal());
            format!("cut {v} off for 7 s")
        }
        Fault::PausePrimary => {
            let v = victim(fleet);
            let pid = fleet.cluster.pid(v).expect("the victim runs") as i32;
            // SAFETY: signals to a process this test started.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            tokio::time::sleep(Duration::from_secs(3)).await;
            unsafe { libc::kill(pid, libc::SIGCONT) };
            format!("paused {v} for 3 s")
        }
        Fault::RestartEmpty => {
            let v = victim(fleet);
            blocking(|| {
                fleet.cluster.kill(v);
                fleet.cluster.restart(v);
                fleet.cluster.cli(v, &["CONFIG", "SET", "hz", "100"]);
            });
            format!("restarted {v} empty")
        }
        Fault::ConfigReload => {
            fleet.reloads += 1;
            let before = reloads(fleet).await;
            let yaml = soak_yaml(fleet.shape.period.as_secs(), fleet.reloads);
            std::fs::write(fleet.config_dir.join("soak.yaml"), yaml).expect("rewrite");
            let mut after = before.clone();
            for _ in 0..100 {
                after = reloads(fleet).await;
                if after.iter().zip(&before).all(|(a, b)| a > b) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            format!("reloaded (successful reloads of A, B, C: {before:?} -> {after:?})")
        }
        Fault::XdsUpdate => {
            fleet.xds_updates += 1;
            let n = fleet.xds_updates;
            let from = fleet.plane.received().len();
            let version = format!("v{n}");
            fleet.plane.set(&version, xds_config(n));
            let acked = fleet
                .plane
                .ack_within(&version, from, Duration::from_secs(15))
                .await;
            if let Err(why) = acked {
                // What X itself says about its stream tells a stream that stopped answering
                // from a control plane that never sent.
                let log = fleet
                    .instances
                    .iter()
                    .find(|(name, _)| *name == "X")
                    .map(|(_, b)| b.log())
                    .unwrap_or_default();
                let xds: Vec<&str> = log.lines().filter(|l| l.contains("xDS")).collect();
                let broke = format!(
                    "{why}\nX's xDS log lines (the last 20 of {}):\n{}",
                    xds.len(),
                    xds[xds.len().saturating_sub(20)..].join("\n")
                );
                return Struck {
                    what: format!("X did not ACK {version} within 15 s"),
                    broke: Some(broke),
                };
            }
            format!("X applied and ACKed {version}")
        }
    };
    Struck { what, broke: None }
}

/// Each file-configured instance's count of successful reloads (from `/metrics`).
async fn reloads(fleet: &Fleet) -> Vec<u64> {
    let http = crate::support::server::http_client();
    let mut out = Vec::new();
    for (name, b) in &fleet.instances {
        if *name == "X" {
            continue;
        }
        let text = match http.get(format!("{}/metrics", b.http_url)).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let n = text
            .lines()
            .find(|l| {
                l.starts_with("tollgate_config_reloads_total") && l.contains("result=\"success\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        out.push(n as u64);
    }
    out
}

/// After a period: every node running and the cluster healthy again (a killed node rejoined,
/// a cut or paused primary demoted and resynced) before the next period starts.
pub async fn heal(fleet: &mut Fleet) {
    let cluster = &mut fleet.cluster;
    let healthy = blocking(|| {
        for a in cluster.addrs() {
            if cluster.pid(a).is_none() {
                cluster.restart(a);
            }
        }
        cluster.config_set_all("hz", "100");
        cluster.wait_healthy(Duration::from_secs(60))
    });
    if let Err(why) = healthy {
        panic!("the cluster did not heal: {why}");
    }
}
