//! One limit across regions in the service (docs/multi-region.md): this instance's region,
//! the home regions' Redis it asks, the leases it knows ([`board`]), and one refill task per
//! global limit ([`refill`]) that follows the config. The arithmetic is
//! `crate::algorithm::global`'s, the same the simulation runs; [`home`] runs the authority
//! against home's Redis.
//!
//! Only the Redis store has regions: a region's lease is a counter in its Redis, shared by
//! its instances. Without `--region` none of this exists and a request pays one test per
//! charge (`Limit::global`).

pub mod board;
pub mod error;
pub mod home;
pub mod inner;
pub mod moving;
pub mod pool;
pub mod refill;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use fred::prelude::*;
use tokio::task::JoinHandle;

use self::board::Board;
use self::error::RegionalError;
use self::home::HomeLink;
use self::inner::{Regional, PERIOD};
use super::connection::client::Clients;
use super::connection::migration::Migrations;
use super::options::RedisOptions;
use super::scripts::script::Script;
use crate::base::shutdown::Shutdown;
use crate::config::Config;
use crate::limit::Limit;

/// The region of this instance and how to reach each home region's Redis.
#[derive(Debug, Clone, Default)]
pub struct RegionOptions {
    /// `--region`.
    pub region: String,
    /// `--region-redis NAME=URL`: other regions' Redis (this region's is the store's own).
    pub homes: Vec<(String, String)>,
}

impl Regional {
    /// Connects to every other home region's Redis (in the background, as the store does).
    pub(super) fn new(
        opts: RegionOptions,
        store: &RedisOptions,
        local: Client,
    ) -> Result<Regional, RegionalError> {
        let mut homes = HashMap::new();
        let mut clients = Vec::new();
        for (name, url) in &opts.homes {
            if *name == opts.region {
                return Err(RegionalError::OwnRegion(name.clone()));
            }
            let c = Clients::connect(&RedisOptions {
                url: url.clone(),
                ..store.clone()
            })
            .map_err(|source| RegionalError::Connect {
                name: name.clone(),
                source,
            })?;
            homes.insert(name.clone(), link(name, c.main().clone(), store));
            clients.push(c);
        }
        homes.insert(
            opts.region.clone(),
            link(&opts.region, local.clone(), store),
        );
        Ok(Regional {
            region: opts.region,
            board: Board::default(),
            me: instance_id(),
            homes,
            _clients: clients,
            local,
            migrations: Migrations::default(),
            script: Script::global(),
            key_prefix: store.key_prefix.clone(),
            metrics: store.metrics.clone(),
        })
    }

    /// Runs a refill task per global limit of the running config until shutdown; a limit the
    /// config drops or changes has its task stopped (and restarted as changed).
    pub async fn run(self: Arc<Self>, config: Arc<ArcSwap<Config>>, shutdown: Shutdown) {
        let mut tasks: HashMap<String, (Arc<Limit>, JoinHandle<()>)> = HashMap::new();
        let mut seen: Option<Arc<Config>> = None;
        loop {
            let current = config.load_full();
            if seen.as_ref().is_none_or(|s| !Arc::ptr_eq(s, &current)) {
                let limits = current.global_limits();
                let ids: Vec<String> = limits
                    .iter()
                    .filter_map(|l| Some(l.global.as_ref()?.id.clone()))
                    .collect();
                tasks.retain(|id, (limit, task)| {
                    let keep = limits
                        .iter()
                        .any(|l| l.global.as_ref().is_some_and(|g| g.id == *id) && **l == **limit);
                    if !keep {
                        task.abort();
                    }
                    keep
                });
                for l in limits {
                    let id = l.global.as_ref().expect("a global limit").id.clone();
                    tasks.entry(id).or_insert_with(|| {
                        let task = tokio::spawn(refill::run(self.clone(), l.clone()));
                        (l, task)
                    });
                }
                self.board.retain(&ids);
                seen = Some(current);
            }
            tokio::select! {
                _ = tokio::time::sleep(PERIOD) => {}
                _ = shutdown.wait() => break,
            }
        }
        for (_, (_, task)) in tasks {
            task.abort();
        }
    }

    /// The home regions this instance can reach by name (its own among them).
    pub fn homes(&self) -> Vec<String> {
        let mut v: Vec<String> = self.homes.keys().cloned().collect();
        v.sort();
        v
    }
}

/// A random name for this instance's locks.
fn instance_id() -> String {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        b = (std::process::id() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64))
        .to_le_bytes();
    }
    format!("{:016x}", u64::from_le_bytes(b))
}

fn link(name: &str, client: Client, store: &RedisOptions) -> HomeLink {
    HomeLink {
        name: name.to_string(),
        client,
        migrations: Migrations::default(),
        wait_replicas: store.wait_replicas,
    }
}
