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

use super::migration::{self, Migrations};
use crate::algorithm::Landing;
use crate::decision::ChargeOutcome;
use crate::plan::Role;
use crate::store::placement::{Group, Spec};
use crate::store::protocol::{GroupAnswer, Mode, Undo};
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
                load.map_err(|e| {
                    EvalError::Failed(StoreError(format!("script load failed: {e}")))
                })?;
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
                let e = StoreError(format!("redis: {e}"));
                return Err(if not_run {
                    EvalError::NotRun(e)
                } else {
                    EvalError::Failed(e)
                });
            }
        }
    }
}

/// KEYS and ARGV for one group. `undo` (refund mode) is per charge of the group.
pub fn args(
    g: &Group,
    specs: &[Spec<'_>],
    now: &Value,
    mode: Mode,
    quota_descriptors: usize,
    undo: &[Undo],
) -> (Vec<Key>, Vec<Value>) {
    let keys: Vec<Key> = g
        .keys
        .iter()
        .map(|&s| Key::from(specs[s].key.as_ref()))
        .collect();
    let n = g.charges.len();
    let mut args: Vec<Value> = Vec::with_capacity(4 + n * 8 + undo.len() * 5);
    args.push(now.clone());
    args.push(Value::Integer(mode as i64));
    args.push(Value::Integer(quota_descriptors as i64));
    args.push(Value::Integer(n as i64));
    for (&ci, &key) in g.charges.iter().zip(&g.key_of) {
        let c = &specs[ci];
        let p = &c.params;
        args.push(Value::Integer(key as i64 + 1));
        args.push(Value::from_static_str(p.algorithm.letter()));
        args.push(Value::Integer(p.limit as i64));
        args.push(Value::Integer(p.window_us as i64));
        args.push(Value::Integer(p.burst as i64));
        args.push(Value::Integer(p.overdraft as i64));
        args.push(Value::Integer(c.cost as i64));
        args.push(match c.role {
            Role::Enforced => Value::from_static_str("e"),
            Role::Shadow => Value::from_static_str("s"),
            Role::Quota { descriptor } => Value::from(format!("q{descriptor}")),
        });
    }
    for u in undo {
        args.push(Value::Integer(u.allowed as i64));
        args.push(Value::Integer(u.kept().added as i64));
        args.push(Value::Integer(u.amount() as i64));
        args.push(Value::Integer(u.landing.mark.0 as i64));
        args.push(Value::Integer(u.landing.mark.1 as i64));
    }
    (keys, args)
}

/// One group's answer.
pub struct Reply {
    /// The `now` the script decided at (µs); a take-back answers at the same time.
    pub now: i64,
    pub answer: GroupAnswer,
}

/// Parses `{ now, then allowed, remaining, wait_us (-1 = never), added, mark1, mark2 }`.
pub fn parse_reply(g: &Group, reply: &[i64]) -> Result<Reply, StoreError> {
    if reply.len() != 1 + 6 * g.charges.len() {
        return Err(StoreError(format!(
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
