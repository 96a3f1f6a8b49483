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

use super::super::connection::migration::Migrations;
use super::super::durability::durable::Wait;
use super::super::scripts::script::{self, Script};
use super::error::RegionalError;
use crate::algorithm::global::authority::Authority;
use crate::algorithm::global::terms::{Ask, GlobalLimit, Grant, Kind};

/// Writes that lost a race are tried again this many times (within the ask's time); an ask
/// that finds the authority held waits its turn until its time is up.
const TRIES: usize = 100;

/// How long one asker holds the authority between its read and its write (a far region's
/// round trip must fit; an asker that dies frees it by then).
pub(super) const HOLD_MS: u64 = 1000;

/// How long a hold handed to the next asker in the queue waits for it to read (its next try
/// comes within a round trip, of at most 350 ms, and 5 ms).
pub(super) const HANDED_MS: u64 = 500;

/// A queued asker is dropped after this long: a region that asks again keeps its place (its
/// first arrival), one that stopped asking (its instance died, or lost its region's lock)
/// makes way.
pub(super) const QUEUED_MS: u64 = 3000;

/// How long one ask may take: half the silence after which a region counts itself cut off
/// (`inner::SILENT_AFTER`, 1 s), so an ask that waited out its time in the authority's queue
/// leaves room for the region's next, which keeps its place there.
const ASK_WITHIN: Duration = Duration::from_millis(500);

/// A home region's Redis, as one region's refill tasks reach it.
pub struct HomeLink {
    pub name: String,
    pub client: Client,
    pub migrations: Migrations,
    pub wait_replicas: u32,
}

impl HomeLink {
    /// One ask of asker `me` (this instance) answered by the authority of `key`, within half a
    /// second: the grant, and the units issued in the window after it.
    pub async fn ask(
        &self,
        script: &Script,
        key: &str,
        settings: GlobalLimit,
        regions: &[String],
        ask: &Ask,
        me: &str,
    ) -> Result<(Grant, u64), RegionalError> {
        let within = ASK_WITHIN;
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
        let queue = format!("{key}-queue");
        let mut tries = 0;
        let mut written_over = 0;
        loop {
            tries += 1;
            let (now, old, held): (String, String, i64) = script::eval(
                &self.client,
                &options,
                script,
                &self.migrations,
                until,
                None,
                || {
                    (
                        vec![key.into(), hold.as_str().into(), queue.as_str().into()],
                        vec!["read".into(), me.into(), HOLD_MS.to_string().into()],
                    )
                },
            )
            .await
            .map_err(redis)?;
            if held == 0 {
                // Another region's ask holds it (a round trip at most); this asker is queued,
                // and the write that ends that hold hands it here in turn. Out of time, it
                // keeps its place: its region's next ask is the same asker.
                if Instant::now() >= until {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            let now: u64 = now.parse().map_err(|_| RegionalError::State(now.clone()))?;
            let mut authority = state_of(&old, settings, regions, now)?;
            let mut grant = match authority.moved_to() {
                // Frozen: its counts went to the new home, which this region's config does
                // not name yet. Nothing granted; the write below hands the hold on.
                Some(to) => {
                    moved_warning(key, &self.name, to);
                    authority.moved_answer(now)
                }
                None => authority.grant(ask, now),
            };
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
                        vec![key.into(), hold.as_str().into(), queue.as_str().into()],
                        vec![
                            "cas".into(),
                            old.as_str().into(),
                            new.as_str().into(),
                            ttl_ms.to_string().into(),
                            me.into(),
                            QUEUED_MS.to_string().into(),
                            HANDED_MS.to_string().into(),
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
            // Written in between (by an asker without the hold: an older release, or one
            // whose hold ran out).
            written_over += 1;
            if written_over >= TRIES || Instant::now() >= until {
                break;
            }
        }
        Err(RegionalError::Busy(tries))
    }
}

/// The authority as read (`old`, '' for none) at `now`, under this asker's config.
fn state_of(
    old: &str,
    settings: GlobalLimit,
    regions: &[String],
    now: u64,
) -> Result<Authority, RegionalError> {
    if old.is_empty() {
        // A first start, or a state lost (evicted, flushed, a failover without WAIT):
        // cautious, so grants in flight land or lapse first.
        let mut a = Authority::named(settings, regions, now);
        a.take_over(now);
        return Ok(a);
    }
    let mut a: Authority =
        serde_json::from_str(old).map_err(|e| RegionalError::State(e.to_string()))?;
    a.reconfigure(settings, regions);
    Ok(a)
}

fn moved_warning(key: &str, from: &str, to: &str) {
    if let Some(suppressed) = crate::base::log_throttle::due_named("global_moved", key, 16) {
        tracing::warn!(
            authority = %key, suppressed,
            "the home of this global limit moved from {from} to {to}: set home: {to} in this \
             region's config (asks to {from} are granted nothing)"
        );
    }
}

/// The authority's state outlives two of its windows (and at least a minute).
pub(super) fn state_ttl_ms(settings: &GlobalLimit) -> u64 {
    let window_ms = match settings.kind {
        Kind::Window { window_us, .. } => window_us / 1000,
        Kind::Bucket { .. } => 0,
    };
    (2 * window_ms).max(60_000) + 60_000
}
