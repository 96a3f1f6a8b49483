//! The Redis store: single node, Sentinel or Redis Cluster, through `fred`.
//!
//! A request's charges are split into [`placement`] groups by hash tag: every key of a group
//! lives in one slot, so one `EVALSHA` of `lua/tollgate.lua` decides and charges the group
//! atomically ([`script`]). Descriptor groups run concurrently (one round trip for all of
//! them), then shared limits in a fixed order (one round trip each); once the request is sure
//! to be denied, the rest only evaluate (dry run) and charge nothing. When the request is
//! denied after a group charged, the same script takes back exactly that group's charges and
//! answers as things stand. That can briefly under-admit, never over-admit.
//!
//! A decision runs in a task of its own, and the caller waits for it up to the deadline; past
//! it, or on any Redis error, the caller applies the failure policy. A decision whose caller
//! is gone (deadline, cancelled call) still collects its late replies and takes back whatever
//! landed, so a script that runs after its deadline leaves counters as if the request never
//! happened. [`health`] keeps readiness, topology and scripts current; the [`local_cache`]
//! lets the deny path of an exhausted key skip Redis.

mod health;
mod local_cache;
mod placement;
mod script;
mod url;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::{Options, ReconnectPolicy};
use futures::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use self::local_cache::{LocalCache, Lookup};
use self::placement::{place, Placed};
use self::script::{args, eval, parse_reply, Mode, Script, Undo};
use super::{ApplyMode, ChargeOutcome, Store, StoreError};
use crate::algorithm::Landing;
use crate::clock::Clock;
use crate::decision::{verdict, Verdict};
use crate::plan::Plan;

/// The format of keys and stored state; part of every key, so a tollgate that changes the
/// format never reads another format's state (during a rolling upgrade both count apart).
pub const KEY_FORMAT: &str = "v2:";

/// How long a decision whose caller has gone keeps waiting for Redis's late replies, to take
/// back what they charged.
const LATE_REPLY: Duration = Duration::from_secs(5);

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
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    script: Script,
    opts: RedisOptions,
    /// `key_prefix` + [`KEY_FORMAT`].
    prefix: String,
    ready: AtomicBool,
    /// Upkeep rounds so far (`maintain` runs about twice a second).
    ticks: AtomicU64,
    cache: LocalCache,
    /// The instance clock, for the local cache.
    wall: Arc<dyn Clock>,
}

/// What every script call of one request shares.
struct Call<'a> {
    placed: &'a Placed,
    /// The script's `now` argument.
    now: Value,
    /// Quota descriptors in the whole request.
    quota: usize,
    /// TRYAGAIN / CLUSTERDOWN are retried until then.
    retry_until: Instant,
}

/// A decision's result, with what it left in Redis.
struct Decided {
    outcomes: Vec<ChargeOutcome>,
    /// Per spec, what stays landed.
    landings: Vec<Landing>,
    /// Per group, the `now` its script ran at (`None`: it did not run).
    group_now: Vec<Option<i64>>,
}

impl Store for RedisStore {
    async fn apply(
        &self,
        plan: &Plan<'_>,
        mode: ApplyMode,
    ) -> Result<Vec<ChargeOutcome>, StoreError> {
        let inner = &self.inner;
        let placed = place(plan, &inner.prefix);
        let mut dry_first = false;
        if !mode.count_rejected {
            match inner.cache.lookup(&placed, inner.wall.now_us()) {
                Lookup::AllExhausted(outcomes) => return Ok(outcomes),
                Lookup::SomeExhausted => dry_first = true,
                Lookup::Miss => {}
            }
        }
        let deadline = Instant::now() + inner.opts.timeout;
        let quota = plan.quota_descriptors;
        let (tx, rx) = oneshot::channel();
        let task = inner.clone();
        tokio::spawn(async move {
            match task.decide(&placed, quota, mode, dry_first, deadline).await {
                Ok(decided) => {
                    task.cache
                        .remember(&placed, &decided.outcomes, task.wall.now_us());
                    if let Err(Ok(decided)) = tx.send(Ok(decided)) {
                        // The caller gave up: nothing of this request may stay.
                        task.take_back(&placed, quota, &decided, None).await;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        });
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(result)) => result.map(|d| d.outcomes),
            Ok(Err(_)) => Err(StoreError("redis decision task failed".into())),
            Err(_) => Err(StoreError(format!(
                "redis did not answer within {:?}",
                inner.opts.timeout
            ))),
        }
    }

    fn is_ready(&self) -> bool {
        self.inner.ready.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn maintain(&self) {
        self.inner.upkeep().await;
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
            default_command_timeout: LATE_REPLY,
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
            inner: Arc::new(Inner {
                script: Script::tollgate(),
                cache: LocalCache::new(opts.local_cache_size),
                prefix: format!("{}{KEY_FORMAT}", opts.key_prefix),
                client,
                opts,
                ready: AtomicBool::new(false),
                ticks: AtomicU64::new(0),
                wall,
            }),
        })
    }
}

impl Inner {
    /// A script call may wait for its reply this long: past the caller's deadline, a late
    /// reply still tells what to take back.
    fn call_options(&self) -> Options {
        Options {
            timeout: Some(LATE_REPLY),
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

    /// Runs one group's script.
    async fn run(
        &self,
        call: &Call<'_>,
        gi: usize,
        mode: Mode,
        undo: &[Undo],
    ) -> Result<script::Reply, StoreError> {
        let g = &call.placed.groups[gi];
        let reply = eval(
            &self.client,
            &self.call_options(),
            &self.script,
            call.retry_until,
            || args(g, &call.placed.specs, &call.now, mode, call.quota, undo),
        )
        .await?;
        parse_reply(g, &reply)
    }

    /// Decides the request: every group, then takes back what the final verdict says must
    /// not stay. On an error, takes back what landed and reports the error.
    async fn decide(
        &self,
        placed: &Placed,
        quota: usize,
        mode: ApplyMode,
        dry_first: bool,
        deadline: Instant,
    ) -> Result<Decided, StoreError> {
        let n = placed.specs.len();
        let mut decided = Decided {
            outcomes: vec![
                ChargeOutcome {
                    allowed: true,
                    remaining: 0,
                    wait_us: None,
                };
                n
            ],
            landings: vec![Landing::default(); n],
            group_now: vec![None; placed.groups.len()],
        };
        let call = Call {
            placed,
            now: self.now_arg(),
            quota,
            retry_until: deadline,
        };
        let verdict_of = |d: &Decided, known: &[bool]| {
            verdict(
                placed.specs.iter().enumerate().map(|(i, s)| {
                    let allowed = !known[i] || d.outcomes[i].allowed;
                    (s.role, s.params.overdraft, allowed)
                }),
                quota,
            )
        };
        let record = |d: &mut Decided, known: &mut [bool], gi: usize, reply: script::Reply| {
            d.group_now[gi] = Some(reply.now);
            for (&ci, (outcome, landing)) in placed.groups[gi].charges.iter().zip(reply.charges) {
                d.outcomes[ci] = outcome;
                d.landings[ci] = landing;
                known[ci] = true;
            }
        };

        if dry_first {
            // A limit is known exhausted: evaluate everything without charging, and answer
            // from that unless the cache was stale.
            let mut known = vec![false; n];
            let groups = 0..placed.groups.len();
            let replies = join_all(groups.map(|gi| self.run(&call, gi, Mode::DryRun, &[]))).await;
            for (gi, reply) in replies.into_iter().enumerate() {
                record(&mut decided, &mut known, gi, reply?);
            }
            if verdict_of(&decided, &known) == Verdict::Deny {
                return Ok(decided);
            }
        }

        let normal = if mode.count_rejected {
            Mode::CountRejected
        } else {
            Mode::Decide
        };
        let mut known = vec![false; n];
        // Descriptor groups share no key: they run concurrently, one round trip for all.
        // Shared (global, hot) limits run after them, in order, and once the request is sure
        // to be denied they only evaluate: a shared key never holds a charge that is about to
        // be taken back.
        let first_shared = placed
            .groups
            .iter()
            .position(|g| g.shared)
            .unwrap_or(placed.groups.len());
        let replies = join_all((0..first_shared).map(|gi| self.run(&call, gi, normal, &[]))).await;
        let mut failure = None;
        for (gi, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok(r) => record(&mut decided, &mut known, gi, r),
                Err(e) => failure = Some(e),
            }
        }
        if failure.is_none() {
            for gi in first_shared..placed.groups.len() {
                let sure_denied =
                    !mode.count_rejected && verdict_of(&decided, &known) == Verdict::Deny;
                let m = if sure_denied { Mode::DryRun } else { normal };
                match self.run(&call, gi, m, &[]).await {
                    Ok(r) => record(&mut decided, &mut known, gi, r),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(e) = failure {
            self.take_back(placed, quota, &decided, None).await;
            return Err(e);
        }
        if !mode.count_rejected {
            let v = verdict_of(&decided, &known);
            self.take_back(placed, quota, &decided, Some(v))
                .await
                .into_iter()
                .for_each(|(gi, reply)| {
                    for (&ci, (outcome, landing)) in
                        placed.groups[gi].charges.iter().zip(reply.charges)
                    {
                        decided.outcomes[ci] = outcome;
                        decided.landings[ci] = landing;
                    }
                });
        }
        Ok(decided)
    }

    /// Takes back the landed charges that `verdict` says must not stay (`None`: all of them),
    /// one script call per group, concurrently. Returns the groups' new answers. A failure
    /// only logs: those charges then stay until their window passes (under-admitting, never
    /// over-admitting).
    async fn take_back(
        &self,
        placed: &Placed,
        quota: usize,
        decided: &Decided,
        verdict: Option<Verdict>,
    ) -> Vec<(usize, script::Reply)> {
        let mut calls = Vec::new();
        for (gi, g) in placed.groups.iter().enumerate() {
            let Some(now) = decided.group_now[gi] else {
                continue;
            };
            let undo: Vec<Undo> = g
                .charges
                .iter()
                .map(|&ci| {
                    let landing = decided.landings[ci];
                    let keep = verdict.is_some_and(|v| v.lands(placed.specs[ci].params.overdraft));
                    Undo {
                        allowed: decided.outcomes[ci].allowed,
                        kept: if keep { landing.added } else { 0 },
                        undo: if keep { Landing::default() } else { landing },
                    }
                })
                .collect();
            if undo.iter().all(|u| u.undo.added == 0) {
                continue;
            }
            calls.push(async move {
                let call = Call {
                    placed,
                    now: Value::Integer(now),
                    quota,
                    retry_until: Instant::now() + LATE_REPLY,
                };
                let reply = self.run(&call, gi, Mode::Refund, &undo).await;
                (gi, reply)
            });
        }
        let mut out = Vec::new();
        for (gi, reply) in join_all(calls).await {
            match reply {
                Ok(r) => out.push((gi, r)),
                Err(e) => tracing::warn!(
                    error = %e,
                    "taking back a charge failed: it stays until its window passes"
                ),
            }
        }
        out
    }
}
