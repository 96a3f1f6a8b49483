//! Replica reads (`--read-replicas`, Redis Cluster): a request that charges nothing (every
//! cost 0) is answered by a dry run of every group on a replica of its primary; any failure
//! there sends the request through the protocol on the primaries.

use fred::prelude::*;
use fred::types::config::Options;
use futures::future::join_all;

use super::super::connection::client::call_options;
use super::super::error::{classify, SOMEWHERE};
use super::super::inner::Inner;
use super::decide::{Decided, RedisDecision};
use super::script::{args, parse_reply, unpack, CallHead, Script};
use crate::algorithm::rule::Mode;
use crate::store::error::StoreError;
use crate::store::protocol::Protocol;
use crate::telemetry::counted::StoreOp;

impl Inner {
    /// Answers a request that charges nothing from replicas: every group a dry run. `None`
    /// when a replica could not answer (the caller asks the primaries).
    pub(in crate::store::redis) async fn ask_replicas(
        &self,
        call: &RedisDecision<'_>,
    ) -> Option<Decided> {
        let placed = call.placed;
        let quota = placed.quota_descriptors;
        let client = self.clients.for_call();
        let options = call_options();
        let replies = join_all(placed.groups.iter().map(|g| {
            let (client, options) = (&client, &options);
            async move {
                let head = CallHead {
                    now: call.now,
                    mode: Mode::DryRun,
                    quota_descriptors: quota,
                    slot: placed.slot,
                };
                let (keys, arg) = args(g, &placed.charges, head, &[], None);
                let started = std::time::Instant::now();
                let reply = eval_replica(client, options, &self.script, keys, vec![arg]).await;
                self.opts
                    .metrics
                    .store_duration(StoreOp::Decide, started.elapsed().as_secs_f64());
                reply
                    .and_then(|r| unpack(&r))
                    .and_then(|r| parse_reply(g, &r))
            }
        }))
        .await;
        let mut protocol = Protocol::new(placed, Mode::Decide);
        for (gi, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok(r) => protocol.record(gi, r.answer),
                Err(e) => {
                    tracing::debug!(error = %e, "a replica could not answer; asking the primaries");
                    return None;
                }
            }
        }
        self.opts.metrics.replica_reads.inc();
        Some(Decided::nothing_landed(protocol.into_outcomes()))
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
