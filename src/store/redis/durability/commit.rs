//! Group commit for `--redis-wait-replicas`: one `WAIT` per connection covers every script call
//! sent on it before.
//!
//! `WAIT` counts every write made on its own connection up to it, whatever hash slot or batch
//! it came from. On a serving thread (its own fred client, one connection per node) the script
//! calls that charge are sent per node: the thread's calls for one node leave as one pipeline,
//! `EVALSHA` per call (each batch of [`super::super::scripts::coalesce`] is one call) and one
//! `WAIT` behind them all, and at most one such pipeline per node and thread is in flight. The
//! calls that arrive while it is (Redis would hold them behind its `WAIT` anyway) wait in
//! tollgate and leave together as the next pipeline as soon as it returns. So under load one
//! `WAIT` covers every call of a replica round trip, across hash slots and batches, instead of
//! one `WAIT` per batch; a lone call leaves at once as `EVALSHA` then `WAIT`, as before.
//!
//! A `WAIT` counts only the writes of its own connection, so a call is covered only when its
//! script went where the `WAIT` went: the node fred routes its hash slot to is the pipeline's
//! node before and after it is sent, and that node's connection (its `CLIENT ID`) is the same
//! before and after. Otherwise (a topology change or a reconnection in between) the call is
//! answered as not replicated, and the failure policy answers: the charge may survive or be
//! lost. Off the serving threads (a shared client, tasks that move between threads) and while
//! following a migrating hash slot, a call sends its own pipeline
//! ([`super::durable::evalsha_then_wait`]).

use std::cell::RefCell;

use fred::clients::Pipeline;
use fred::prelude::*;
use fred::types::cluster::ClusterRouting;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::durable::Wait;
use crate::store::redis::connection::migration::evalsha_args;

/// A script's reply, and how many replicas acknowledged it (-1: not known whether the `WAIT`
/// counted its writes).
pub type Covered = Result<(Value, i64), Error>;

/// Not known whether the `WAIT` counted the call's writes.
const UNKNOWN: i64 = -1;

/// A script call waiting for its node's next pipeline.
struct Call {
    hash_slot: u16,
    command: Vec<Value>,
    wait: Wait,
    reply: oneshot::Sender<Covered>,
}

/// One client's calls to one node on this thread: a group of [`Call`]s.
struct NodeCalls {
    client: Client,
    node: Option<Server>,
    /// A pipeline is in flight (its task sends the next one for the calls that came since).
    flushing: bool,
    waiting: Vec<Call>,
}

thread_local! {
    static GROUPS: RefCell<Vec<NodeCalls>> = const { RefCell::new(Vec::new()) };
}

/// Whether this thread's calls stay on it: on a current-thread runtime (a serving thread), a
/// task resumes on the thread whose thread-local state it joined (a batch of
/// [`super::super::scripts::coalesce`], a group here); on a work-stealing runtime it could
/// resume elsewhere while calls still join that state here.
pub fn thread_bound() -> bool {
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::CurrentThread)
}

/// `EVALSHA sha keys args` in this thread's next pipeline to the node holding `hash_slot`, with
/// a `WAIT` behind it: the script's reply and how many replicas acknowledged.
pub async fn evalsha_covered(
    (client, options): (&Client, &Options),
    hash_slot: u16,
    sha: &str,
    keys: Vec<Key>,
    args: Vec<Value>,
    wait: &Wait,
) -> Covered {
    let node = if client.is_clustered() {
        owner(client.cached_cluster_state().as_ref(), hash_slot)
    } else {
        None
    };
    let (reply, heard) = oneshot::channel();
    let call = Call {
        hash_slot,
        command: evalsha_args(sha, keys, args),
        wait: *wait,
        reply,
    };
    let start = GROUPS.with_borrow_mut(|groups| {
        let i = match groups
            .iter()
            .position(|g| g.node == node && g.client.id() == client.id())
        {
            Some(i) => i,
            None => {
                groups.push(NodeCalls {
                    client: client.clone(),
                    node: node.clone(),
                    flushing: false,
                    waiting: Vec::new(),
                });
                groups.len() - 1
            }
        };
        let group = &mut groups[i];
        group.waiting.push(call);
        !std::mem::replace(&mut group.flushing, true)
    });
    if start {
        // Spawned on this (current-thread) runtime: it runs once the tasks ready now have run,
        // so the calls that came together leave together.
        tokio::spawn(flush(client.clone(), options.clone(), node));
    }
    heard.await.unwrap_or_else(|_| {
        Err(Error::new(
            ErrorKind::Canceled,
            "the serving thread stopped before the call was sent",
        ))
    })
}

/// Sends one group's pipelines until no call is left waiting.
async fn flush(client: Client, options: Options, node: Option<Server>) {
    loop {
        let taken = GROUPS.with_borrow_mut(|groups| {
            let i = groups
                .iter()
                .position(|g| g.node == node && g.client.id() == client.id())?;
            if groups[i].waiting.is_empty() {
                groups.swap_remove(i);
                return None;
            }
            Some(std::mem::take(&mut groups[i].waiting))
        });
        let Some(calls) = taken else {
            return;
        };
        send((&client, &options), node.as_ref(), calls).await;
    }
}

/// One pipeline: every call's `EVALSHA`, then one `WAIT`; each call hears its own reply.
async fn send((client, options): (&Client, &Options), node: Option<&Server>, mut calls: Vec<Call>) {
    let wait = calls
        .iter()
        .fold(None, |w, c| Wait::later(w, Some(c.wait)))
        .expect("a pipeline has calls");
    let wanted = calls.iter().map(|c| c.wait.replicas).max().unwrap_or(0);
    let routing = client.cached_cluster_state();
    let here_before: Vec<bool> = calls
        .iter()
        .map(|c| owner(routing.as_ref(), c.hash_slot).as_ref() == node)
        .collect();
    let connection = connection_id(client, node);
    let pipeline = Pipeline::from(client.with_options(options));
    let mut replies = Vec::with_capacity(calls.len());
    for call in &mut calls {
        let evalsha =
            CustomCommand::new_static("EVALSHA", ClusterHash::Custom(call.hash_slot), false);
        // Queued, not sent: a pipeline's commands leave together when it is sent.
        replies.push(
            pipeline
                .custom::<(), Value>(evalsha, std::mem::take(&mut call.command))
                .await,
        );
    }
    // Routed by a hash slot of the node's (as the calls' are), so it shares their connection.
    let wait_slot = calls
        .iter()
        .zip(&here_before)
        .find_map(|(c, here)| here.then_some(c.hash_slot))
        .unwrap_or(calls[0].hash_slot);
    let wait_cmd = CustomCommand::new_static("WAIT", ClusterHash::Custom(wait_slot), false);
    let wait_args = vec![
        Value::Integer(i64::from(wanted)),
        Value::Integer(wait.timeout_ms()),
    ];
    replies.push(pipeline.custom::<(), Value>(wait_cmd, wait_args).await);
    let mut answers = match replies.into_iter().find_map(Result::err) {
        None => pipeline.try_all::<Value>().await,
        Some(e) => vec![Err(e)],
    };
    if answers.len() != calls.len() + 1 {
        // The pipeline failed as a whole (its one error says why: the connection, fail-fast).
        let e = match answers.pop() {
            Some(Err(e)) if answers.is_empty() => e,
            _ => Error::new(
                ErrorKind::Unknown,
                "unexpected pipeline reply (EVALSHA then WAIT)",
            ),
        };
        for call in calls {
            let _ = call.reply.send(Err(e.clone()));
        }
        return;
    }
    let acked = match answers.pop().expect("WAIT's reply") {
        Ok(Value::Integer(n)) => Ok(n),
        Ok(other) => Err(Error::new(
            ErrorKind::Protocol,
            format!("WAIT answered {other:?}"),
        )),
        Err(e) => Err(e),
    };
    let routing = client.cached_cluster_state();
    let same_connection = connection.is_some()
        && connection == connection_id(client, node)
        && owner(routing.as_ref(), wait_slot).as_ref() == node;
    for ((call, answer), here) in calls.into_iter().zip(answers).zip(here_before) {
        let covered =
            same_connection && here && owner(routing.as_ref(), call.hash_slot).as_ref() == node;
        let reply = match (answer, &acked) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e.clone()),
            (Ok(v), Ok(n)) => Ok((v, if covered { *n } else { UNKNOWN })),
        };
        let _ = call.reply.send(reply);
    }
}

/// The node `hash_slot` is routed to (`None` on a single node).
fn owner(routing: Option<&ClusterRouting>, hash_slot: u16) -> Option<Server> {
    routing.and_then(|r| r.get_server(hash_slot).cloned())
}

/// The `CLIENT ID` of the client's connection to `node` (its only one on a single node).
fn connection_id(client: &Client, node: Option<&Server>) -> Option<i64> {
    let ids = client.connection_ids();
    match node {
        Some(node) => ids.get(node).copied(),
        None if ids.len() == 1 => ids.values().next().copied(),
        None => None,
    }
}
