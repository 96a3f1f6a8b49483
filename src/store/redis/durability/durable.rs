//! Charges that survive a failover (`--redis-wait-replicas N`): a script call that charges is
//! followed by Redis `WAIT N <ms>` on the same connection, and its answer counts only once `N`
//! replicas acknowledged every write that connection made (so the script's too).
//!
//! `WAIT` cannot run inside a script, and on a cluster it must reach the node that ran the
//! script on the connection that sent it. On a serving thread the calls for one node share
//! one pipeline and one `WAIT` ([`super::commit`]); elsewhere, and while following a migrating
//! hash slot, [`evalsha_then_wait`] writes `[ASKING,] EVALSHA, WAIT` as one pipeline routed by
//! one hash slot (fred keeps one connection per node per client and writes a pipeline's
//! commands back to back), so a redirect retried by [`super::super::scripts::script::eval`] is
//! followed by a `WAIT` on the node that finally ran it. Fewer acknowledgements than `N` by the
//! deadline is [`Cause::NotReplicated`]: the charge may survive or be lost, so the failure
//! policy answers.
//!
//! A `WAIT` holds its connection in Redis: the commands behind it on that connection run once
//! it returns, one replica round trip later, or at its timeout, which is never past the
//! decision's deadline (the caller's, at most `--redis-timeout`).

use fred::clients::Pipeline;
use fred::prelude::*;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};
use tokio::time::Instant;

use super::super::connection::migration::evalsha_args;

use crate::store::error::Cause;
use crate::store::error::StoreError;

/// How many replicas must acknowledge a call, and by when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub replicas: u32,
    pub until: Instant,
}

impl Wait {
    /// `WAIT`'s timeout: the time left until `until`, at least 1 ms (0 would block forever).
    pub fn timeout_ms(&self) -> i64 {
        let left = self.until.saturating_duration_since(Instant::now());
        left.as_millis().clamp(1, i64::MAX as u128) as i64
    }

    /// The later of two waits (a batch waits as long as its most patient call).
    pub fn later(a: Option<Wait>, b: Option<Wait>) -> Option<Wait> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if a.until >= b.until { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// A `WAIT` of `acked` replicas (-1: not known whether it counted the call's writes): fine,
    /// or the call's failure.
    pub fn check(
        &self,
        acked: i64,
        place: impl FnOnce() -> Option<Server>,
    ) -> Result<(), StoreError> {
        if acked >= i64::from(self.replicas) {
            return Ok(());
        }
        let place = match place() {
            Some(s) => format!("redis {}:{}", s.host, s.port),
            None => super::super::error::SOMEWHERE.to_string(),
        };
        Err(StoreError::new(
            place,
            Cause::NotReplicated {
                acked: u32::try_from(acked).ok(),
                wanted: self.replicas,
            },
        ))
    }
}

/// The deadline of a call's `WAIT`: a fifth of the time the call has left before its own
/// deadline (`call_until`: when its caller's answer is due, at most `--redis-timeout` away),
/// so a short count is answered as such before the decision times out. Redis ends a `WAIT`
/// that falls short on its next `hz` tick (every 100 ms by default; docs/redis.md).
pub fn until(call_until: Instant) -> Instant {
    let now = Instant::now();
    now + call_until.saturating_duration_since(now) * 4 / 5
}

/// `[ASKING,] EVALSHA sha keys args` then `WAIT`, as one pipeline (`call`: the options,
/// `asking`, `hash_slot`, `sha`): routed by `hash_slot` as a plain `EVALSHA` is, or, when
/// `asking`, to the node importing the slot. The script's reply, and how many replicas
/// acknowledged.
pub async fn evalsha_then_wait(
    client: &Client,
    call: (&Options, Option<&Server>, u16, &str),
    keys: Vec<Key>,
    args: Vec<Value>,
    wait: &Wait,
) -> Result<(Value, i64), Error> {
    let (options, asking, hash_slot, sha) = call;
    // A node named outright (`cluster_node`) that fred has no connection to sends fred's router
    // reconnecting in a loop (seen while a cut-off primary failed over): only the importing
    // node, which just answered ASK, is named.
    let options = Options {
        cluster_node: asking.cloned(),
        ..options.clone()
    };
    let pipeline = Pipeline::from(client.with_options(&options));
    if asking.is_some() {
        let asking = CustomCommand::new_static("ASKING", ClusterHash::Custom(hash_slot), false);
        pipeline.custom::<(), Value>(asking, Vec::new()).await?;
    }
    let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(hash_slot), false);
    pipeline
        .custom::<(), Value>(evalsha, evalsha_args(sha, keys, args))
        .await?;
    let wait_cmd = CustomCommand::new_static("WAIT", ClusterHash::Custom(hash_slot), false);
    let wait_args = vec![
        Value::Integer(i64::from(wait.replicas)),
        Value::Integer(wait.timeout_ms()),
    ];
    pipeline.custom::<(), Value>(wait_cmd, wait_args).await?;
    let mut replies = pipeline.try_all::<Value>().await;
    if replies.len() != 2 + usize::from(asking.is_some()) {
        // The pipeline failed as a whole (its one error says why: the connection, fail-fast).
        return Err(match replies.pop() {
            Some(Err(e)) if replies.is_empty() => e,
            _ => Error::new(
                ErrorKind::Unknown,
                "unexpected pipeline reply (EVALSHA then WAIT)",
            ),
        });
    }
    let acked = replies.pop().expect("WAIT's reply");
    let script = replies.pop().expect("EVALSHA's reply")?;
    let acked = match acked? {
        Value::Integer(n) => n,
        other => {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("WAIT answered {other:?}"),
            ))
        }
    };
    Ok((script, acked))
}

/// The node a hash slot's calls go to, as the client last saw the topology (`None` on a single
/// node, or when no topology is known: the pipeline then routes by the hash slot).
pub fn owner(client: &Client, hash_slot: u16) -> Option<Server> {
    client
        .cached_cluster_state()
        .and_then(|s| s.get_server(hash_slot).cloned())
}
