//! Home's side in the service: the authority of a global limit is a key in the home region's
//! Redis holding [`Authority`]'s state. A refill task reads it with home's time, runs
//! [`Authority::grant`] here, and writes the state back only if nobody wrote it in between
//! (else it reads again): the same arithmetic the simulation runs, on home's clock.
//! With `--redis-wait-replicas N` the write is followed by `WAIT N` on its connection, and a
//! grant not acknowledged is not spent (it stays counted: stranded, never lost).

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use tokio::time::Instant;

use super::super::durable::Wait;
use super::super::migration::Migrations;
use super::super::script::{self, Script};
use super::error::RegionalError;
use crate::algorithm::global::authority::Authority;
use crate::algorithm::global::terms::{Ask, GlobalLimit, Grant, Kind};

/// Writes that lost a race, or found the authority held, are tried again this many times
/// (within the ask's time).
const TRIES: usize = 100;

/// How long one asker holds the authority between its read and its write (a far region's
/// round trip must fit; an asker that dies frees it by then).
const HOLD_MS: u64 = 1000;

/// A home region's Redis, as one region's refill tasks reach it.
pub struct HomeLink {
    pub name: String,
    pub client: Client,
    pub migrations: Migrations,
    pub wait_replicas: u32,
}

impl HomeLink {
    /// One ask answered by the authority of `key`, within `within`: the grant, and the units
    /// issued in the window after it.
    pub async fn ask(
        &self,
        script: &Script,
        key: &str,
        settings: GlobalLimit,
        regions: usize,
        ask: &Ask,
        within: Duration,
    ) -> Result<(Grant, u64), RegionalError> {
        let until = Instant::now() + within;
        let options = Options {
            timeout: Some(within),
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        };
        let redis = |e: script::EvalError| {
            RegionalError::Redis(crate::store::error::StoreError::from(e).to_string())
        };
        // The authority is held from the read to the write: a near region writing every
        // period would otherwise keep a far one's write from ever finding the state it read.
        let hold = format!("{key}-held");
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        let me = format!("{:016x}{}", u64::from_le_bytes(b), std::process::id());
        for _ in 0..TRIES {
            let (now, old, held): (String, String, i64) = script::eval(
                &self.client,
                &options,
                script,
                &self.migrations,
                until,
                None,
                || {
                    (
                        vec![key.into(), hold.as_str().into()],
                        vec![
                            "read".into(),
                            me.as_str().into(),
                            HOLD_MS.to_string().into(),
                        ],
                    )
                },
            )
            .await
            .map_err(redis)?;
            if held == 0 {
                // Another region's ask holds it: a round trip at most.
                tokio::time::sleep(Duration::from_millis(5)).await;
                if Instant::now() >= until {
                    break;
                }
                continue;
            }
            let now: u64 = now.parse().map_err(|_| RegionalError::State(now.clone()))?;
            let mut authority = if old.is_empty() {
                // A first start, or a state lost (evicted, flushed, a failover without
                // WAIT): cautious, so grants in flight land or lapse first.
                let mut a = Authority::new(settings, regions, now);
                a.take_over(now);
                a
            } else {
                let mut a: Authority =
                    serde_json::from_str(&old).map_err(|e| RegionalError::State(e.to_string()))?;
                a.reconfigure(settings, regions);
                a
            };
            let mut grant = authority.grant(ask, now);
            let new = serde_json::to_string(&authority)
                .map_err(|e| RegionalError::State(e.to_string()))?;
            let ttl_ms = state_ttl_ms(&settings);
            let wait = (self.wait_replicas > 0).then_some(Wait {
                replicas: self.wait_replicas,
                until,
            });
            let written: String = script::eval(
                &self.client,
                &options,
                script,
                &self.migrations,
                until,
                wait,
                || {
                    (
                        vec![key.into(), hold.as_str().into()],
                        vec![
                            "cas".into(),
                            old.as_str().into(),
                            new.as_str().into(),
                            ttl_ms.to_string().into(),
                            me.as_str().into(),
                        ],
                    )
                },
            )
            .await
            .map_err(redis)?;
            if let Ok(at) = written.parse::<u64>() {
                // Counted from the write (the answer leaves then), not from the read: a
                // next window's start is that much nearer.
                if grant.starts_in_us > 0 {
                    grant.starts_in_us =
                        (grant.starts_in_us.saturating_sub(at.saturating_sub(now))).max(1);
                }
                return Ok((grant, authority.issued()));
            }
        }
        Err(RegionalError::Busy(TRIES))
    }
}

/// The authority's state outlives two of its windows (and at least a minute).
fn state_ttl_ms(settings: &GlobalLimit) -> u64 {
    let window_ms = match settings.kind {
        Kind::Window { window_us, .. } => window_us / 1000,
        Kind::Bucket { .. } => 0,
    };
    (2 * window_ms).max(60_000) + 60_000
}
