//! Moving a global limit's home (`tollgate move-home`, docs/multi-region.md, "Moving home"):
//! the authority's state is frozen where it is (marked moved: from then on it answers every
//! ask with nothing) and copied, as it was, to the new home's Redis, which goes on from every
//! count the old home had. No window is granted twice: the old home grants nothing after the
//! mark, and the new one starts from everything it had issued.

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Expiration, SetOptions};
use tokio::time::Instant;

use super::super::connection::migration::Migrations;
use super::super::connection::url::fred_config;
use super::super::scripts::script::{self, Script};
use super::error::RegionalError;
use super::home::{HANDED_MS, HOLD_MS, QUEUED_MS};
use super::refill::AUTHORITY_PREFIX;
use crate::algorithm::global::authority::Authority;

/// The two homes' clocks may differ by at most this: windows are counted on the home's clock,
/// so a move shifts every window's edges by the difference.
const MAX_SKEW_MS: i64 = 1_000;

/// One authority moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Its key (`tollgate:{g|<limit>}|authority`).
    pub key: String,
    /// The window it last counted in, and the units issued there.
    pub window: u64,
    pub issued: u64,
    /// The new home's clock minus the old one's (ms).
    pub skew_ms: i64,
}

/// Moves the authority of every global limit homed in the Redis at `from` (or only the one
/// whose id is `only`) to the Redis at `to`, the region `to_region`'s.
pub async fn move_home(
    from: &str,
    to: &str,
    to_region: &str,
    only: Option<&str>,
) -> Result<Vec<Moved>, RegionalError> {
    let from = connect(from).await?;
    let to = connect(to).await?;
    let keys: Vec<String> = match only {
        Some(id) => vec![super::refill::Keys::new("", id).authority],
        None => authority_keys(&from).await?,
    };
    let mut out = Vec::new();
    for key in keys {
        out.push(move_one(&from, &to, &key, to_region).await?);
    }
    Ok(out)
}

async fn connect(url: &str) -> Result<Client, RegionalError> {
    let config = fred_config(url).map_err(|e| RegionalError::Redis(format!("{url}: {e}")))?;
    let client = Client::new(config, None, None, None);
    client.init().await.map_err(redis)?;
    Ok(client)
}

fn redis(e: impl std::fmt::Display) -> RegionalError {
    RegionalError::Redis(e.to_string())
}

/// Every authority key in `client`'s Redis (each primary's, on a Cluster).
async fn authority_keys(client: &Client) -> Result<Vec<String>, RegionalError> {
    use futures::TryStreamExt;
    let pattern = format!("{AUTHORITY_PREFIX}{{g|*}}|authority");
    let found: Vec<Key> = if client.is_clustered() {
        client
            .scan_cluster_buffered(pattern.as_str(), Some(100), None)
            .try_collect()
            .await
    } else {
        client
            .scan_buffered(pattern.as_str(), Some(100), None)
            .try_collect()
            .await
    }
    .map_err(redis)?;
    let mut keys: Vec<String> = found
        .iter()
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect();
    if keys.is_empty() {
        return Err(RegionalError::State(
            "no authority here: this Redis is home to no global limit".into(),
        ));
    }
    keys.sort();
    Ok(keys)
}

async fn time_us(client: &Client) -> Result<i64, RegionalError> {
    let time = CustomCommand::new_static("TIME", ClusterHash::Random, false);
    let (s, us): (String, String) = client
        .custom(time, Vec::<Value>::new())
        .await
        .map_err(redis)?;
    let n = |v: &str| {
        v.parse::<i64>()
            .map_err(|_| RegionalError::State(format!("TIME {v}")))
    };
    Ok(n(&s)? * 1_000_000 + n(&us)?)
}

async fn move_one(
    from: &Client,
    to: &Client,
    key: &str,
    to_region: &str,
) -> Result<Moved, RegionalError> {
    let skew_ms = (time_us(to).await? - time_us(from).await?) / 1000;
    if skew_ms.abs() > MAX_SKEW_MS {
        return Err(RegionalError::State(format!(
            "the new home's clock is {skew_ms} ms off the old one's (at most {MAX_SKEW_MS} \
             ms): windows are counted on home's clock"
        )));
    }
    let there: Option<String> = to.get(key).await.map_err(redis)?;
    if there.is_some() {
        return Err(RegionalError::State(format!(
            "{key}: the new home already holds an authority (moved before, or run there): \
             nothing moved"
        )));
    }
    let (old, ttl_ms) = hold(from, key).await?;
    let mut authority: Authority =
        serde_json::from_str(&old).map_err(|e| RegionalError::State(e.to_string()))?;
    match authority.moved_to() {
        Some(r) if r != to_region => {
            return Err(RegionalError::State(format!("{key}: moved to {r} already")));
        }
        // Marked before, not copied (the copy failed): the frozen state is still the truth.
        Some(_) => {}
        None => {
            authority.set_moved(Some(to_region.to_string()));
            let marked = serde_json::to_string(&authority)
                .map_err(|e| RegionalError::State(e.to_string()))?;
            write_if(from, key, &old, &marked, ttl_ms).await?;
        }
    }
    authority.set_moved(None);
    let copy =
        serde_json::to_string(&authority).map_err(|e| RegionalError::State(e.to_string()))?;
    let set: Option<String> = to
        .set(
            key,
            copy.as_str(),
            Some(Expiration::PX(ttl_ms as i64)),
            Some(SetOptions::NX),
            false,
        )
        .await
        .map_err(redis)?;
    if set.is_none() {
        return Err(RegionalError::State(format!(
            "{key}: the new home wrote an authority meanwhile; the old one is marked moved, \
             the new one goes on from what it learns (docs/multi-region.md)"
        )));
    }
    Ok(Moved {
        key: key.to_string(),
        window: authority.window(),
        issued: authority.issued(),
        skew_ms,
    })
}

fn options() -> Options {
    Options {
        timeout: Some(Duration::from_secs(2)),
        fail_fast: true,
        max_attempts: Some(1),
        ..Default::default()
    }
}

/// Takes the authority's hold as an asker does (waiting its turn, up to 5 s): its state and
/// how long it lives.
async fn hold(from: &Client, key: &str) -> Result<(String, u64), RegionalError> {
    let until = Instant::now() + Duration::from_secs(5);
    let script = Script::global();
    let migrations = Migrations::default();
    loop {
        let (_, old, held): (String, String, i64) =
            script::eval(from, &options(), &script, &migrations, until, None, || {
                (
                    vec![
                        key.into(),
                        format!("{key}-held").into(),
                        format!("{key}-queue").into(),
                    ],
                    vec![
                        "read".into(),
                        "move-home".into(),
                        HOLD_MS.to_string().into(),
                    ],
                )
            })
            .await
            .map_err(|e| redis(crate::store::error::StoreError::from(e)))?;
        if held == 1 {
            if old.is_empty() {
                return Err(RegionalError::State(format!(
                    "{key}: no state (expired, or never written): the new home starts afresh \
                     and cautious once the config names it; nothing to move"
                )));
            }
            let ttl: i64 = from.pttl(key).await.map_err(redis)?;
            return Ok((old, (ttl.max(0) as u64).max(60_000)));
        }
        if Instant::now() >= until {
            return Err(RegionalError::Busy(0));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Writes `new` over `old` (as an asker's write: only if nobody wrote in between), handing
/// the hold on.
async fn write_if(
    from: &Client,
    key: &str,
    old: &str,
    new: &str,
    ttl_ms: u64,
) -> Result<(), RegionalError> {
    let until = Instant::now() + Duration::from_secs(2);
    let written: String = script::eval(
        from,
        &options(),
        &Script::global(),
        &Migrations::default(),
        until,
        None,
        || {
            (
                vec![
                    key.into(),
                    format!("{key}-held").into(),
                    format!("{key}-queue").into(),
                ],
                vec![
                    "cas".into(),
                    old.into(),
                    new.into(),
                    ttl_ms.to_string().into(),
                    "move-home".into(),
                    QUEUED_MS.to_string().into(),
                    HANDED_MS.to_string().into(),
                ],
            )
        },
    )
    .await
    .map_err(|e| redis(crate::store::error::StoreError::from(e)))?;
    if written.parse::<u64>().is_err() {
        return Err(RegionalError::State(format!(
            "{key}: written in between (an older release's ask): nothing moved, try again"
        )));
    }
    Ok(())
}
