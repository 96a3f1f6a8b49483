//! The Redis side of a decision: the Lua scripts (`lua/decide.lua`, `lua/refund.lua`), their
//! argument and reply formats, and the `EVALSHA` call that survives `NOSCRIPT` and resharding.
//!
//! Argument and reply layouts are documented at the top of each script; this file is the only
//! Rust code that knows them.

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;

use super::placement::Group;
use crate::decision::ChargeOutcome;
use crate::plan::{Charge, Role};
use crate::store::StoreError;

/// A script and the SHA1 `EVALSHA` names it by.
pub struct Script {
    pub lua: &'static str,
    pub sha: String,
}

impl Script {
    fn new(lua: &'static str) -> Script {
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }

    pub fn decide() -> Script {
        Script::new(include_str!("../../../lua/decide.lua"))
    }

    pub fn refund() -> Script {
        Script::new(include_str!("../../../lua/refund.lua"))
    }
}

/// What `decide.lua` does with a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecideMode {
    /// Decide all-or-nothing and charge.
    Decide = 0,
    /// Every charge lands (envoyproxy/ratelimit's counting).
    CountRejected = 1,
    /// Evaluate and answer; write nothing.
    DryRun = 2,
}

/// `EVALSHA`, loading the script on every primary and retrying once on NOSCRIPT; retries
/// TRYAGAIN / CLUSTERDOWN (resharding, failover) until the caller's deadline.
pub async fn eval(
    client: &Client,
    options: &Options,
    script: &Script,
    request: impl Fn() -> (Vec<Key>, Vec<Value>),
) -> Result<Vec<i64>, StoreError> {
    let mut loaded = false;
    loop {
        // Built per attempt: a retry is rare, and the first attempt moves its buffers.
        let (keys, args) = request();
        let res: Result<Vec<i64>, Error> = client
            .with_options(options)
            .evalsha(&script.sha, keys, args)
            .await;
        match res {
            Ok(v) => return Ok(v),
            Err(e) if e.details().starts_with("NOSCRIPT") && !loaded => {
                loaded = true;
                client
                    .script_load_cluster::<(), _>(script.lua)
                    .await
                    .map_err(|e| StoreError(format!("script load failed: {e}")))?;
            }
            Err(e)
                if e.details().starts_with("TRYAGAIN")
                    || e.details().starts_with("CLUSTERDOWN") =>
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(e) => return Err(StoreError(format!("redis: {e}"))),
        }
    }
}

/// KEYS and ARGV of `decide.lua` for one group.
pub fn decide_args(
    prefix: &str,
    g: &Group,
    charges: &[Charge<'_>],
    now_arg: &Value,
    mode: DecideMode,
    quota_total: usize,
) -> (Vec<Key>, Vec<Value>) {
    let keys: Vec<Key> = g
        .keys
        .iter()
        .map(|k| Key::from(format!("{prefix}{k}")))
        .collect();
    let mut args: Vec<Value> = Vec::with_capacity(4 + g.charges.len() * 8);
    args.push(now_arg.clone());
    args.push(Value::Integer(mode as i64));
    args.push(Value::Integer(quota_total as i64));
    args.push(Value::Integer(g.charges.len() as i64));
    for (&ci, &key) in g.charges.iter().zip(&g.key_of) {
        let c = &charges[ci];
        let p = &c.limit.params;
        args.push(Value::Integer(key as i64 + 1));
        args.push(Value::from_static_str(p.algorithm.letter()));
        args.push(Value::Integer(p.limit as i64));
        args.push(Value::Integer(p.window_us as i64));
        args.push(Value::Integer(p.burst as i64));
        args.push(Value::Integer(p.overdraft as i64));
        args.push(Value::Integer(c.cost.min(i64::MAX as u64) as i64));
        args.push(match c.role {
            Role::Enforced => Value::from_static_str("e"),
            Role::Shadow => Value::from_static_str("s"),
            Role::Quota { descriptor } => Value::from(format!("q{descriptor}")),
        });
    }
    (keys, args)
}

/// One group's answer from `decide.lua`.
pub struct GroupReply {
    /// The `now` the script decided at (µs), which a refund must name.
    pub now: i64,
    /// Per charge of the group, in the group's order: its outcome and whether it was written.
    pub charges: Vec<(ChargeOutcome, bool)>,
}

/// Parses `{ now, then allowed, remaining, wait_us (-1 = never), landed per charge }`.
pub fn parse_decide_reply(g: &Group, reply: &[i64]) -> Result<GroupReply, StoreError> {
    if reply.len() != 1 + 4 * g.charges.len() {
        return Err(StoreError(format!(
            "unexpected script reply of {} values",
            reply.len()
        )));
    }
    let charges = reply[1..]
        .chunks_exact(4)
        .map(|r| {
            let outcome = ChargeOutcome {
                allowed: r[0] == 1,
                remaining: r[1].max(0) as u64,
                wait_us: (r[2] >= 0).then_some(r[2] as u64),
            };
            (outcome, r[3] == 1)
        })
        .collect();
    Ok(GroupReply {
        now: reply[0],
        charges,
    })
}

/// KEYS and ARGV of `refund.lua`: undo `refund` (charge indexes) charged at `now`.
pub fn refund_args(
    prefix: &str,
    refund: &[usize],
    charges: &[Charge<'_>],
    now: i64,
) -> (Vec<Key>, Vec<Value>) {
    let mut keys: Vec<Key> = Vec::new();
    let mut args = vec![Value::Integer(now), Value::Integer(refund.len() as i64)];
    for &ci in refund {
        let c = &charges[ci];
        let key = Key::from(format!("{prefix}{}", c.key));
        let index = match keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                keys.push(key);
                keys.len() - 1
            }
        };
        let p = &c.limit.params;
        args.extend([
            Value::Integer(index as i64 + 1),
            Value::from_static_str(p.algorithm.letter()),
            Value::Integer(p.limit as i64),
            Value::Integer(p.window_us as i64),
            Value::Integer(c.cost.min(i64::MAX as u64) as i64),
        ]);
    }
    (keys, args)
}
