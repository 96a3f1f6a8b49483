//! The Redis side of a decision: `lua/tollgate.lua`, its argument and reply formats, and the
//! `EVALSHA` call that survives `NOSCRIPT` and resharding.
//!
//! The layouts are documented at the top of the script; this file is the only Rust code that
//! knows them.

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use fred::util::redis_keyslot;
use tokio::time::Instant;

use super::error::{classify, SOMEWHERE};
use super::migration::{self, Migrations};
use crate::algorithm::Landing;
use crate::algorithm::Mode;
use crate::decision::ChargeOutcome;
use crate::limit::Algorithm;
use crate::plan::Role;
use crate::store::error::Cause;
use crate::store::placement::{Group, PlacedCharge};
use crate::store::protocol::{GroupAnswer, Refund};
use crate::store::StoreError;

/// A script and the SHA1 `EVALSHA` names it by.
pub struct Script {
    pub lua: &'static str,
    pub sha: String,
}

impl Script {
    pub fn tollgate() -> Script {
        let lua = include_str!("../../../lua/tollgate.lua");
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }
}

/// Why a script call failed.
#[derive(Debug)]
pub enum EvalError {
    /// Redis refused it before running it (TRYAGAIN, CLUSTERDOWN, a redirect) and the call's
    /// time to retry is up: nothing of it ran.
    NotRun(StoreError),
    /// Anything else: it may have run.
    Failed(StoreError),
}

impl From<EvalError> for StoreError {
    fn from(e: EvalError) -> StoreError {
        match e {
            EvalError::NotRun(e) | EvalError::Failed(e) => e,
        }
    }
}

/// `EVALSHA`, loading the script on every primary and retrying once on NOSCRIPT; retries
/// TRYAGAIN / CLUSTERDOWN (resharding, failover) until `retry_until`, and follows a slot that
/// is migrating to the node importing it ([`migration`]).
pub async fn eval<R: FromValue>(
    client: &Client,
    options: &Options,
    script: &Script,
    migrations: &Migrations,
    retry_until: Instant,
    request: impl Fn() -> (Vec<Key>, Vec<Value>),
) -> Result<R, EvalError> {
    let mut loaded = false;
    // Where the slot is being imported, once its owner has redirected us.
    let mut asking: Option<(u16, Server)> = None;
    let mut redirects = 0u32;
    loop {
        // Built per attempt: a retry is rare, and the first attempt moves its buffers.
        let (keys, args) = request();
        let slot = keys.first().map_or(0, |k| redis_keyslot(k.as_bytes()));
        let res: Result<R, Error> = match &asking {
            None => {
                client
                    .with_options(options)
                    .evalsha(&script.sha, keys, args)
                    .await
            }
            Some((_, node)) => {
                migration::evalsha_asking(client, options, node, &script.sha, keys, args).await
            }
        };
        match res {
            Ok(v) => return Ok(v),
            Err(e) if e.details().starts_with("NOSCRIPT") && !loaded => {
                loaded = true;
                let load = match &asking {
                    // A node fred does not route this slot to may lack the script.
                    Some((_, node)) => {
                        client
                            .with_cluster_node(node.clone())
                            .script_load::<(), _>(script.lua)
                            .await
                    }
                    None => client.script_load_cluster::<(), _>(script.lua).await,
                };
                load.map_err(|e| EvalError::Failed(classify(&e, None, SOMEWHERE)))?;
            }
            Err(e)
                if (e.details().starts_with("TRYAGAIN")
                    || e.details().starts_with("CLUSTERDOWN"))
                    && Instant::now() < retry_until =>
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(e) if migration::redirected(&e) && Instant::now() < retry_until => {
                // MOVED (fred has re-read the topology: the next try goes to the new owner)
                // or ASK (the slot is migrating: the next try goes to the importing node).
                // Redirected while already asking: the migration moved on; look again.
                if let Some((slot, _)) = asking.take() {
                    migrations.forget(slot);
                }
                asking = migrations
                    .importing_node(client, slot)
                    .await
                    .map(|node| (slot, node));
                redirects += 1;
                if redirects > 1 {
                    // The topology is still settling: do not hammer it.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            Err(e) => {
                let not_run = e.details().starts_with("TRYAGAIN")
                    || e.details().starts_with("CLUSTERDOWN")
                    || migration::redirected(&e);
                let e = classify(&e, None, SOMEWHERE);
                return Err(if not_run {
                    EvalError::NotRun(e)
                } else {
                    EvalError::Failed(e)
                });
            }
        }
    }
}

/// `EVALSHA` on a replica of the keys' primary (fred's replica routing, with `READONLY`),
/// loading the script on every replica on NOSCRIPT (Redis does not replicate the script cache).
/// Any other failure is the caller's to handle (it asks the primaries).
pub async fn eval_replica(
    client: &Client,
    options: &Options,
    script: &Script,
    keys: Vec<Key>,
    args: Vec<Value>,
) -> Result<Value, StoreError> {
    let replicas = client.with_options(options).replicas();
    let first: Result<Value, Error> = replicas
        .evalsha(&script.sha, keys.clone(), args.clone())
        .await;
    match first {
        Err(e) if e.details().starts_with("NOSCRIPT") => {
            for primary in client.replicas().nodes().into_values() {
                // Round-robin over the primary's replicas: one load per replica of it.
                let to = Options {
                    cluster_node: Some(primary),
                    ..options.clone()
                };
                let _: Result<Value, Error> = client
                    .with_options(&to)
                    .replicas()
                    .script_load(script.lua)
                    .await;
            }
            replicas
                .evalsha(&script.sha, keys, args)
                .await
                .map_err(|e| classify(&e, None, SOMEWHERE))
        }
        other => other.map_err(|e| classify(&e, None, SOMEWHERE)),
    }
}

/// KEYS and the one argument of a group's call: every number packed (see the script), `now`
/// (µs; `None`: the script reads Redis `TIME`) first. `refunds` (refund mode) is per charge of
/// the group.
pub fn args(
    g: &Group,
    specs: &[PlacedCharge<'_>],
    now: Option<i64>,
    mode: Mode,
    quota_descriptors: usize,
    refunds: &[Refund],
) -> (Vec<Key>, Value) {
    let keys: Vec<Key> = g
        .keys
        .iter()
        .map(|&s| Key::from(specs[s].key.as_ref()))
        .collect();
    let n = g.charges.len();
    let mut packed = Packed::with_numbers(5 + n * 8 + refunds.len() * 5);
    packed.push_signed(now.unwrap_or(-1));
    packed.push(keys.len() as u64);
    packed.push(mode as u64);
    packed.push(quota_descriptors as u64);
    packed.push(n as u64);
    for (&ci, &key) in g.charges.iter().zip(&g.key_of) {
        let c = &specs[ci];
        let p = &c.params;
        packed.push(key as u64 + 1);
        packed.push(match p.algorithm {
            Algorithm::FixedWindow => 0,
            Algorithm::SlidingWindow => 1,
            Algorithm::TokenBucket => 2,
        });
        packed.push(p.limit);
        packed.push(p.window_us);
        packed.push(p.burst);
        packed.push(p.overdraft as u64);
        packed.push(c.cost);
        packed.push(match c.role {
            Role::Enforced => 0,
            Role::Shadow => 1,
            Role::Quota { descriptor } => 2 + descriptor as u64,
        });
    }
    for u in refunds {
        packed.push(u.allowed as u64);
        packed.push(u.kept().added);
        packed.push(u.amount());
        packed.push(u.landing.mark.0);
        packed.push(u.landing.mark.1);
    }
    (keys, packed.into_value())
}

/// Numbers packed as the script unpacks them: little-endian doubles (`struct` format `<d`).
/// Every number is an integer below 2^53 (config validation and `--max-hits` bound them), so
/// each is exact.
struct Packed(Vec<u8>);

impl Packed {
    fn with_numbers(n: usize) -> Packed {
        Packed(Vec::with_capacity(n * 8))
    }

    fn push(&mut self, v: u64) {
        self.0.extend_from_slice(&(v as f64).to_le_bytes());
    }

    fn push_signed(&mut self, v: i64) {
        self.0.extend_from_slice(&(v as f64).to_le_bytes());
    }

    fn into_value(self) -> Value {
        Value::Bytes(self.0.into())
    }
}

/// The numbers of a script's reply: `"="` then packed little-endian doubles. Anything else is
/// the error a call of a batch failed with.
pub fn unpack(reply: &Value) -> Result<Vec<i64>, StoreError> {
    match reply.as_bytes().map(|b| b.split_first()) {
        Some(Some((b'=', numbers))) if numbers.len() % 8 == 0 => Ok(numbers
            .chunks_exact(8)
            .map(|d| f64::from_le_bytes(d.try_into().expect("8 bytes")) as i64)
            .collect()),
        Some(_) if !matches!(reply, Value::Bytes(_)) => {
            Err(unreadable(reply.as_str().unwrap_or_default().to_string()))
        }
        _ => Err(unreadable(format!("unexpected script reply {reply:?}"))),
    }
}

/// One group's answer.
pub struct Reply {
    /// The `now` the script decided at (µs); a refund answers at the same time.
    pub now: i64,
    pub answer: GroupAnswer,
}

/// Parses the numbers of a reply: `now`, then per charge allowed, remaining, wait_us (-1 =
/// never), added, mark1, mark2.
pub fn parse_reply(g: &Group, reply: &[i64]) -> Result<Reply, StoreError> {
    if reply.len() != 1 + 6 * g.charges.len() {
        return Err(unreadable(format!(
            "unexpected script reply of {} values",
            reply.len()
        )));
    }
    let answer = reply[1..]
        .chunks_exact(6)
        .map(|r| {
            let outcome = ChargeOutcome {
                allowed: r[0] == 1,
                remaining: r[1].max(0) as u64,
                wait_us: (r[2] >= 0).then_some(r[2] as u64),
            };
            let landing = Landing {
                added: r[3].max(0) as u64,
                mark: (r[4].max(0) as u64, r[5].max(0) as u64),
            };
            (outcome, landing)
        })
        .collect();
    Ok(Reply {
        now: reply[0],
        answer,
    })
}

/// A call's failure as the script answered it, or a reply it should never give.
pub fn unreadable(why: String) -> StoreError {
    StoreError::new(SOMEWHERE, Cause::Script(why))
}
