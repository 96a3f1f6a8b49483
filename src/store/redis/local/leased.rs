//! Deciding a group of leased shared limits (`lease: N`): from the units this instance holds
//! when they cover it, topping the lease up in Redis when they do not, and handing what is
//! unspent back on shutdown. The bookkeeping of the units is [`super::lease::Leases`].

use futures::future::join_all;
use tokio::time::Instant as Deadline;

use super::super::inner::Inner;
use super::super::scripts::decide::RedisDecision;
use super::super::scripts::script::Reply;
use super::lease::{Lean, Refunded};
use crate::algorithm::rule::Mode;
use crate::algorithm::Landing;
use crate::store::error::StoreError;
use crate::store::placement::{Group, Placed, PlacedCharge};
use crate::store::protocol::Refund;

impl Inner {
    /// Runs a group of leased shared limits.
    pub(in crate::store::redis) async fn run_leased(
        &self,
        call: &RedisDecision<'_>,
        g: &Group,
        mode: Mode,
        refunds: &[Refund],
    ) -> Result<Reply, StoreError> {
        let specs = &call.placed.charges;
        let metrics = &self.opts.metrics;
        match mode {
            Mode::Decide => match self.leases.spend(g, specs, self.leases.now(), true) {
                Lean::Local(answer, now) => {
                    metrics.lease_local.inc_by(answer.len() as u64);
                    return Ok(Reply { now, answer });
                }
                Lean::TopUp(top) => {
                    let ci = g.charges[0];
                    let mut spec = specs[ci].clone();
                    spec.cost += top;
                    let one = Group::one_shared();
                    let sent = self.leases.now();
                    let reply = self.run_script(call, &one, &[spec], mode, &[]).await;
                    metrics.lease_takes.inc();
                    let answer = reply.as_ref().ok().map(|r| r.answer[0]);
                    let own = self.leases.topped_up(&specs[ci], top, sent, answer);
                    let mut reply = reply?;
                    match own {
                        Some(own) if own.0.allowed => {
                            reply.answer = vec![own];
                            return Ok(reply);
                        }
                        // Not enough left for the top-up too: spend what the lease holds,
                        // else decide the request exactly.
                        _ => {
                            if let Lean::Local(answer, now) =
                                self.leases.spend(g, specs, self.leases.now(), false)
                            {
                                metrics.lease_local.inc_by(answer.len() as u64);
                                return Ok(Reply { now, answer });
                            }
                        }
                    }
                }
                Lean::Exact => {}
            },
            Mode::Refund => match self.leases.refund(g, specs, refunds, self.leases.now()) {
                Refunded::Here(answer) => {
                    let now = call.now.unwrap_or(0);
                    return Ok(Reply { now, answer });
                }
                Refunded::InRedis { rest, to_lease } => {
                    let mut reply = self.run_script(call, g, specs, mode, &rest).await?;
                    for ((_, kept), back) in reply.answer.iter_mut().zip(to_lease) {
                        if back {
                            *kept = Landing::default();
                        }
                    }
                    return Ok(reply);
                }
            },
            // A leased limit is a fixed window: it holds no slots.
            // Reservations and their settles are decided exactly, by the script.
            Mode::CountRejected
            | Mode::DryRun
            | Mode::Release
            | Mode::Renew
            | Mode::Reserve
            | Mode::Settle
            | Mode::Unreserve => {}
        }
        self.run_script(call, g, specs, mode, refunds).await
    }

    /// Refunds every unspent leased unit of a running window in Redis (on shutdown), so
    /// the other instances can use it; waits at most the decision deadline.
    pub(in crate::store::redis) async fn refund_leases(&self) {
        let unspent = self.leases.drain(self.leases.now());
        if unspent.is_empty() {
            return;
        }
        let calls = unspent.into_iter().map(|u| async move {
            let placed = Placed {
                charges: vec![PlacedCharge {
                    key: u.key.into(),
                    params: u.params,
                    cost: u.units,
                    role: crate::algorithm::rule::Role::Enforced,
                    lease: 0,
                }],
                groups: vec![Group::one_shared()],
                quota_descriptors: 0,
                slot: (0, 0),
            };
            let refund = Refund {
                allowed: true,
                landing: Landing {
                    added: u.units,
                    mark: (u.mark, 0),
                },
                refund: true,
            };
            let call = RedisDecision {
                placed: &placed,
                now: self.now_arg(),
                retry_until: Deadline::now() + self.opts.timeout,
            };
            let g = &placed.groups[0];
            match self
                .run_script(&call, g, &placed.charges, Mode::Refund, &[refund])
                .await
            {
                Ok(_) => tracing::debug!(units = u.units, "refunded a lease"),
                Err(e) => tracing::warn!(
                    error = %e,
                    units = u.units,
                    "refunding a lease failed: its units stay counted until its window ends"
                ),
            }
        });
        let _ = tokio::time::timeout(self.opts.timeout, join_all(calls)).await;
    }
}
