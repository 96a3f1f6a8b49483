//! Telling when a Redis came back empty (restarted without persistence, a replica promoted
//! after a failed sync, a `FLUSHALL`): every counter on it silently restarted from zero.
//!
//! Run ids change on every restart and replication ids on every failover, so neither alone
//! means lost data. A marker does: one key per primary (`<prefix>marker:{<tag>}`, the tag
//! chosen so the key lives in the primary's first hash slot), written once with `SET NX`, no
//! expiry, replicated and persisted like the counters. Upkeep writes it again every few
//! seconds; `SET NX` succeeding where this instance had already seen the marker means the data
//! went. A clean failover (the replica holds the marker) and a restart with persistence (the
//! file holds it) do not raise it; resharding moves the key with its slot.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::config::Options;
use fred::types::{Expiration, SetOptions};
use fred::util::redis_keyslot;
use parking_lot::Mutex;

use super::client::Clients;

/// How long `/readyz` shows that a node lost its data.
pub const SHOWN_FOR: Duration = Duration::from_secs(300);

/// How long one marker write may take.
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);

/// What this instance knows of the markers.
#[derive(Default)]
pub struct Markers {
    /// Hash slots whose marker was seen (found, or written by this instance).
    seen: Mutex<HashSet<u16>>,
    /// The last loss found: which node, and when.
    lost: Mutex<Option<(String, Instant)>>,
    /// Each marker's key, by hash slot (found once).
    keys: Mutex<HashMap<u16, String>>,
}

impl Markers {
    /// Writes each primary's marker where it is missing; returns the primaries (`host:port`,
    /// or the URL's host on a single node) found to have lost theirs since this instance saw
    /// them.
    pub async fn check(&self, clients: &Clients, prefix: &str) -> Vec<String> {
        let client = clients.main();
        let targets: Vec<(Option<Server>, u16)> = if clients.clustered {
            client
                .cached_cluster_state()
                .map(|state| {
                    state
                        .slots()
                        .iter()
                        .map(|range| (Some(range.primary.clone()), range.start))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            vec![(None, 0)]
        };
        let mut lost = Vec::new();
        let mut done: HashSet<String> = HashSet::new();
        for (node, slot) in targets {
            let name = node.as_ref().map_or_else(
                || clients.host.clone(),
                |s| format!("{}:{}", s.host, s.port),
            );
            // A primary's first range only (a primary may serve several).
            if !done.insert(name.clone()) {
                continue;
            }
            let key = self
                .keys
                .lock()
                .entry(slot)
                .or_insert_with(|| marker_key(prefix, slot))
                .clone();
            let opts = Options {
                timeout: Some(WRITE_TIMEOUT),
                fail_fast: true,
                max_attempts: Some(1),
                cluster_node: node,
                ..Default::default()
            };
            let written: Result<Option<String>, Error> = client
                .with_options(&opts)
                .set(
                    key.as_str(),
                    "tollgate",
                    None::<Expiration>,
                    Some(SetOptions::NX),
                    false,
                )
                .await;
            let Ok(written) = written else { continue };
            let first_sight = self.seen.lock().insert(slot);
            if written.is_some() && !first_sight {
                lost.push(name);
            }
        }
        if let Some(node) = lost.first() {
            *self.lost.lock() = Some((node.clone(), Instant::now()));
        }
        lost
    }

    /// The `/readyz` line for a loss found in the last [`SHOWN_FOR`].
    pub fn warning(&self) -> Option<String> {
        let lost = self.lost.lock();
        let (node, when) = lost.as_ref()?;
        let ago = when.elapsed();
        (ago < SHOWN_FOR).then(|| {
            format!(
                "redis {node} came back without its data {}s ago: its counters restarted from zero",
                ago.as_secs()
            )
        })
    }
}

/// The marker key of `slot`: `<prefix>marker:{<tag>}` whose hash tag hashes to `slot`.
fn marker_key(prefix: &str, slot: u16) -> String {
    format!("{prefix}marker:{{{}}}", tag_for(slot))
}

/// A short string whose hash slot is `slot` (found by counting; 16,384 tries on average).
fn tag_for(slot: u16) -> String {
    (0u64..)
        .map(|n| format!("m{n}"))
        .find(|tag| redis_keyslot(tag.as_bytes()) == slot)
        .expect("every slot has a tag")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_markers_key_lives_in_its_slot() {
        for slot in [0u16, 1, 5460, 5461, 16383] {
            let key = marker_key("tg:", slot);
            assert!(key.starts_with("tg:marker:{m"), "{key}");
            assert_eq!(redis_keyslot(key.as_bytes()), slot, "{key}");
        }
    }
}
