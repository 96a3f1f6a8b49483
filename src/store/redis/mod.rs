//! The Redis store: single node, Sentinel or Redis Cluster, through `fred`.
//!
//! A request's charges are split into [`placement`] groups by hash tag: every key of a group
//! lives in one slot, so one `EVALSHA` of `lua/decide.lua` decides and charges the group
//! atomically ([`script`]). Descriptor groups run concurrently (one round trip for all of them),
//! then shared limits in a fixed order (one round trip each); once a group denies, the shared
//! ones only evaluate (dry run) and charge nothing. When the request is denied after a group
//! charged, `lua/refund.lua` undoes exactly that group's charges. That can briefly
//! under-admit, never over-admit.
//!
//! Every call has a deadline; past it, or on any Redis error, the caller applies the failure
//! policy. [`health`] keeps readiness, topology and scripts current; the local over-limit
//! cache lets the deny path of an exhausted key skip Redis.

mod health;
mod placement;
mod script;
mod url;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::{Options, ReconnectPolicy};
use futures::future::join_all;

use self::placement::{placement_groups, quota_descriptors};
use self::script::{decide_args, eval, parse_decide_reply, refund_args, DecideMode, Script};
use super::local_cache::LocalCache;
use super::{ApplyMode, ChargeOutcome, Store, StoreError};
use crate::clock::Clock;
use crate::decision::{verdict, Verdict};
use crate::plan::{Charge, Role};

/// Where "now" comes from for the scripts.
#[derive(Clone)]
pub enum ClockSource {
    /// Redis `TIME` inside the script: every replica of tollgate agrees.
    Redis,
    /// This instance's clock (or a test's), passed to the script.
    Local(Arc<dyn Clock>),
}

#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://`, `rediss://`, `redis-cluster://h:p[,h:p…]`, `redis-sentinel://h:p[,h:p…]/service`.
    pub url: String,
    /// Overrides any password in the URL.
    pub password: Option<String>,
    /// Prepended to every key (outside the hash tag).
    pub key_prefix: String,
    /// Deadline for one decision's Redis work.
    pub timeout: Duration,
    pub clock: ClockSource,
    /// Entries in the local over-limit cache; 0 disables it.
    pub local_cache_size: usize,
}

pub struct RedisStore {
    client: Client,
    decide: Script,
    refund: Script,
    opts: RedisOptions,
    ready: Arc<AtomicBool>,
    /// Upkeep rounds so far (`maintain` runs about twice a second).
    ticks: AtomicU64,
    cache: LocalCache,
    /// The instance clock, for the local cache.
    wall: Arc<dyn Clock>,
}

/// Charges of one group that landed and must be undone, and the `now` they were charged at.
struct Refund {
    charges: Vec<usize>,
    now: i64,
}

impl Store for RedisStore {
    async fn apply(
        &self,
        charges: &[Charge<'_>],
        mode: ApplyMode,
    ) -> Result<Vec<ChargeOutcome>, StoreError> {
        if !mode.count_rejected {
            if let Some(outcomes) = self.cache.deny(charges, self.wall.now_us()) {
                return Ok(outcomes);
            }
        }
        let (outcomes, refunds) =
            tokio::time::timeout(self.opts.timeout, self.apply_groups(charges, mode))
                .await
                .map_err(|_| {
                    StoreError(format!(
                        "redis did not answer within {:?}",
                        self.opts.timeout
                    ))
                })??;
        for refund in refunds {
            self.refund(&refund, charges).await;
        }
        self.cache.remember(charges, &outcomes, self.wall.now_us());
        Ok(outcomes)
    }

    fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn maintain(&self) {
        self.upkeep().await;
    }
}

impl RedisStore {
    /// Creates the client and starts connecting in the background: the store is not ready
    /// until Redis answers, and keeps retrying with backoff while it does not.
    pub fn connect(opts: RedisOptions, wall: Arc<dyn Clock>) -> Result<RedisStore, String> {
        if opts.key_prefix.contains(['{', '}']) {
            return Err("--redis-key-prefix must not contain '{' or '}'".into());
        }
        let mut config = url::fred_config(&opts.url)?;
        if let Some(p) = &opts.password {
            config.password = Some(p.clone());
        }
        // fred's default `fail_fast` gives up on the first connection attempt and never
        // reconnects when Redis was down at start; commands fail fast per call instead.
        config.fail_fast = false;
        let perf = PerformanceConfig {
            default_command_timeout: opts.timeout,
            ..Default::default()
        };
        let conn = ConnectionConfig {
            connection_timeout: Duration::from_secs(1),
            internal_command_timeout: Duration::from_secs(1),
            max_command_attempts: 1,
            ..Default::default()
        };
        let policy = ReconnectPolicy::new_exponential(0, 50, 1_000, 2);
        let client = Client::new(config, Some(perf), Some(conn), Some(policy));
        client.connect();
        Ok(RedisStore {
            decide: Script::decide(),
            refund: Script::refund(),
            cache: LocalCache::new(opts.local_cache_size),
            client,
            opts,
            ready: Arc::new(AtomicBool::new(false)),
            ticks: AtomicU64::new(0),
            wall,
        })
    }

    fn call_options(&self) -> Options {
        Options {
            timeout: Some(self.opts.timeout),
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        }
    }

    fn now_arg(&self) -> Value {
        match &self.opts.clock {
            ClockSource::Redis => Value::from_static_str(""),
            ClockSource::Local(c) => Value::Integer(c.now_us() as i64),
        }
    }

    /// Decides every group; returns the outcomes and the refunds owed.
    async fn apply_groups(
        &self,
        charges: &[Charge<'_>],
        mode: ApplyMode,
    ) -> Result<(Vec<ChargeOutcome>, Vec<Refund>), StoreError> {
        let groups = placement_groups(charges);
        let quota_total = quota_descriptors(charges);
        let now_arg = self.now_arg();
        let options = self.call_options();
        let mut outcomes = vec![
            ChargeOutcome {
                allowed: true,
                remaining: 0,
                wait_us: None,
            };
            charges.len()
        ];
        let mut landed = vec![false; charges.len()];
        // The `now` each group ran at (for refunds); `None` for a group that did not run.
        let mut group_now: Vec<Option<i64>> = vec![None; groups.len()];
        // Records a group's reply; `true` when an enforced non-overdraft limit denied.
        let mut record = |gi: usize, reply: Vec<i64>| -> Result<bool, StoreError> {
            let g = &groups[gi];
            let reply = parse_decide_reply(g, &reply)?;
            group_now[gi] = Some(reply.now);
            let mut denied = false;
            for (&ci, (outcome, charged)) in g.charges.iter().zip(reply.charges) {
                outcomes[ci] = outcome;
                landed[ci] = charged;
                let c = &charges[ci];
                denied |= !outcome.allowed && c.role == Role::Enforced && !c.limit.params.overdraft;
            }
            Ok(denied)
        };
        let (groups_ref, now_ref, options_ref) = (&groups, &now_arg, &options);
        let prefix = self.opts.key_prefix.as_str();
        let decide = |gi: usize, dry: bool| {
            let mode = match (dry, mode.count_rejected) {
                (true, _) => DecideMode::DryRun,
                (false, true) => DecideMode::CountRejected,
                (false, false) => DecideMode::Decide,
            };
            eval(&self.client, options_ref, &self.decide, move || {
                decide_args(prefix, &groups_ref[gi], charges, now_ref, mode, quota_total)
            })
        };
        // Descriptor groups share no key: they run concurrently, one round trip for all.
        // Shared (global, hot) limits run after them, in order, and once an enforced limit
        // has denied they are only evaluated (dry run) for their statuses: a shared key never
        // holds a charge that is about to be refunded.
        let first_shared = groups.iter().position(|g| g.shared).unwrap_or(groups.len());
        let replies = join_all((0..first_shared).map(|gi| decide(gi, false))).await;
        let mut dry = false;
        for (gi, reply) in replies.into_iter().enumerate() {
            dry |= record(gi, reply?)? && !mode.count_rejected;
        }
        for gi in first_shared..groups.len() {
            let reply = decide(gi, dry).await?;
            dry |= record(gi, reply)? && !mode.count_rejected;
        }

        let mut refunds = Vec::new();
        if !mode.count_rejected && groups.len() > 1 {
            let verdict = verdict(
                charges
                    .iter()
                    .zip(&outcomes)
                    .map(|(c, o)| (c.role, c.limit.params.overdraft, o.allowed)),
            );
            let undo = |c: &Charge<'_>| match verdict {
                Verdict::Admit => false,
                Verdict::OverdraftOnly => !c.limit.params.overdraft,
                Verdict::Deny => true,
            };
            for (g, now) in groups.iter().zip(&group_now) {
                let Some(now) = *now else { continue };
                let refund: Vec<usize> = g
                    .charges
                    .iter()
                    .copied()
                    .filter(|&ci| landed[ci] && undo(&charges[ci]))
                    .collect();
                if refund.is_empty() {
                    continue;
                }
                for &ci in &refund {
                    let o = &mut outcomes[ci];
                    o.remaining =
                        (o.remaining + charges[ci].cost).min(charges[ci].limit.params.capacity());
                }
                refunds.push(Refund {
                    charges: refund,
                    now,
                });
            }
        }
        Ok((outcomes, refunds))
    }

    /// Undoes the charges of one group. A failure only logs: the charges then stay until their
    /// window passes (under-admitting, never over-admitting).
    async fn refund(&self, refund: &Refund, charges: &[Charge<'_>]) {
        let (keys, args) = refund_args(&self.opts.key_prefix, &refund.charges, charges, refund.now);
        let res = tokio::time::timeout(
            self.opts.timeout,
            eval(&self.client, &self.call_options(), &self.refund, || {
                (keys.clone(), args.clone())
            }),
        )
        .await;
        match res {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "refund failed: the charge stays until its window passes")
            }
            Err(_) => tracing::warn!("refund timed out: the charge stays until its window passes"),
        }
    }
}
