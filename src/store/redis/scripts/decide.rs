//! Deciding one request in Redis: the decision [`protocol`](crate::store::protocol) driven
//! over its [`placement`](crate::store::placement) groups, each group one script call (or,
//! for leased shared limits, answered from this instance's leases), and the refunds.
//!
//! The caller waits for its decision up to the deadline: when its answer is due
//! ([`Plan::due`], from its `grpc-timeout`), and never longer than `--redis-timeout`; past it,
//! or on any Redis error, the caller applies the failure policy. A decision whose caller is gone (deadline, cancelled
//! call) goes on as a task of its own ([`Detach`]), collects its late replies and refunds
//! whatever landed, so a script that runs after its deadline leaves counters as if the
//! request never happened.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use fred::util::redis_keyslot;
use futures::future::join_all;
use opentelemetry::context::FutureExt;
use opentelemetry::KeyValue;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::super::durability::durable::{self, Wait};
use super::super::error::SOMEWHERE;
use super::super::inner::Inner;
use super::super::local::lease;
use super::super::local::local_cache::Lookup;
use super::super::options::LATE_REPLY;
use super::super::regional::board;
use super::script::{self, args, parse_reply, CallHead};
use crate::algorithm::rule::ChargeOutcome;
use crate::algorithm::rule::Mode;
use crate::algorithm::rule::Verdict;
use crate::algorithm::Landing;
use crate::plan::Plan;
use crate::store::error::Cause;
use crate::store::error::StoreError;
use crate::store::placement::{
    place, record_key_of, record_life_us, Group, Layout, Placed, PlacedCharge,
};
use crate::store::protocol::{self, Next, Protocol, Refund};
use crate::store::Taken;
use crate::telemetry::counted::StoreOp;
use crate::telemetry::logging;

/// One request's decision in Redis: what every script call of it shares.
pub(in crate::store::redis) struct RedisDecision<'a> {
    pub placed: &'a Placed<'static>,
    /// The script's `now` (µs); `None`: the script reads Redis `TIME`.
    pub now: Option<i64>,
    /// TRYAGAIN / CLUSTERDOWN are retried until then.
    pub retry_until: Instant,
}

/// A decision's answers, and what it left in Redis.
pub(in crate::store::redis) struct Decided {
    pub outcomes: Vec<ChargeOutcome>,
    /// Per charge, what it left landed (empty: nothing); see [`Decided::leftovers`].
    pub landings: Vec<Landing>,
    /// Per group, the `now` it ran at (a refund answers at the same time).
    pub group_now: Vec<i64>,
}

impl Decided {
    /// A decision that left nothing landed.
    pub fn nothing_landed(outcomes: Vec<ChargeOutcome>) -> Decided {
        Decided {
            outcomes,
            landings: Vec::new(),
            group_now: Vec::new(),
        }
    }

    /// What is left to refund if the caller gives up: per group, its refunds and the `now`
    /// it ran at. Worked out only then (or for a held call), not for every decision.
    pub fn leftovers(&self, placed: &Placed<'_>) -> Vec<(usize, Vec<Refund>, i64)> {
        if self.landings.is_empty() {
            return Vec::new();
        }
        let refunds = protocol::refunds(placed, &self.outcomes, &self.landings, None);
        with_now(refunds, &self.group_now)
    }
}

/// A decision in progress that must not stop halfway: a script call it awaits may already
/// have charged, and a batch it opened must still be sent. Dropped before it finished, it
/// finishes as a task of its own (which then refunds what it charged, since nobody waits
/// for the answer). The spawned task polls it at once, so every waker it waits on is then
/// that task's.
struct Detach<F: Future<Output = ()> + Send + 'static> {
    decision: Option<Pin<Box<F>>>,
    trace: Option<opentelemetry::Context>,
}

impl<F: Future<Output = ()> + Send + 'static> Drop for Detach<F> {
    fn drop(&mut self) {
        let Some(decision) = self.decision.take() else {
            return;
        };
        // Outside a runtime (it is shutting down) there is nothing left to finish it on.
        let Ok(runtime) = Handle::try_current() else {
            return;
        };
        match self.trace.take() {
            Some(cx) => drop(runtime.spawn(decision.with_context(cx))),
            None => drop(runtime.spawn(decision)),
        }
    }
}

impl Inner {
    /// Decides `plan` on the caller's task, up to the deadline; past it the decision goes on
    /// as a task of its own and the caller gets an error (see the module docs).
    pub(in crate::store::redis) async fn apply(
        self: &Arc<Inner>,
        plan: &Plan<'_>,
        mode: Mode,
        taking: bool,
    ) -> Result<(Vec<ChargeOutcome>, Option<Taken>), StoreError> {
        let inner = self;
        let layout = if inner.clients.clustered {
            Layout::ByTag
        } else {
            Layout::OneNode
        };
        let mut placed = place(plan, &inner.prefix, layout).into_owned();
        let regional = inner.regional.get().filter(|_| board::has_global(plan));
        if let Some(r) = regional {
            r.board.place(plan, &mut placed, inner.wall.now_us());
        }
        let mut dry_first = false;
        if mode == Mode::Decide {
            match inner.cache.lookup(&placed, inner.wall.now_us()) {
                Lookup::AllExhausted(mut outcomes) => {
                    inner.opts.metrics.local_cache_hits.inc();
                    if let Some(r) = regional {
                        r.board
                            .count(plan, mode, &mut outcomes, inner.wall.now_us());
                    }
                    return Ok((outcomes, None));
                }
                Lookup::SomeExhausted => dry_first = true,
                Lookup::Miss => {}
            }
        }
        let now = Instant::now();
        let deadline = plan.due.map_or(now + inner.opts.timeout, |due| {
            due.min(now + inner.opts.timeout)
        });
        let kept = taking.then(|| placed.clone());
        let (tx, rx) = oneshot::channel();
        let task = inner.clone();
        let decision = async move {
            match task.decide(&placed, mode, dry_first, deadline).await {
                Ok(decided) => {
                    // Only a decision says what is exhausted: a settle's or a release's
                    // outcomes do not, and capacity a settle gives back must not stay
                    // hidden behind a reservation refused a moment before.
                    if mode == Mode::Decide {
                        task.cache
                            .remember(&placed, &decided.outcomes, task.wall.now_us());
                    }
                    if let Err(Ok(decided)) = tx.send(Ok(decided)) {
                        // The caller gave up: nothing of this request may stay.
                        task.refund(&placed, decided.leftovers(&placed), mode).await;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        };
        // Decided on the caller's task; if the caller stops waiting (the deadline passed, or
        // the request was cancelled), the rest runs on as a task of its own.
        let mut decision = Detach {
            decision: Some(Box::pin(decision)),
            trace: logging::enabled().then(opentelemetry::Context::current),
        };
        let running = decision.decision.as_mut().expect("not detached yet");
        let mut result = match tokio::time::timeout_at(deadline, running).await {
            Ok(()) => {
                decision.decision = None;
                match rx.await {
                    Ok(result) => result.map(|d| {
                        let taken = kept.map(|placed| Taken {
                            leftovers: d.leftovers(&placed),
                            placed,
                            mode,
                        });
                        (d.outcomes, taken)
                    }),
                    Err(_) => Err(StoreError::new(
                        SOMEWHERE,
                        Cause::NotRun("the decision was dropped".into()),
                    )),
                }
            }
            Err(_) => Err(StoreError::new(
                SOMEWHERE,
                Cause::Timeout(Some(deadline.saturating_duration_since(now))),
            )),
        };
        if let (Some(r), Ok((outcomes, _))) = (regional, &mut result) {
            r.board.count(plan, mode, outcomes, inner.wall.now_us());
        }
        result.map_err(|e| inner.clients.explain(e))
    }

    /// Runs one group: by its script, or, for a group of leased shared limits, from this
    /// instance's leases where they cover it ([`lease`]).
    async fn run(
        &self,
        call: &RedisDecision<'_>,
        gi: usize,
        mode: Mode,
        refunds: &[Refund],
    ) -> Result<script::Reply, StoreError> {
        let placed = call.placed;
        let g = &placed.groups[gi];
        if g.shared && lease::leased(g, &placed.charges) {
            // Boxed: only leased groups pay for this path's future.
            return Box::pin(self.run_leased(call, g, mode, refunds)).await;
        }
        self.run_script(call, g, &placed.charges, mode, refunds)
            .await
    }

    /// Runs a group's script (`g`'s charges index `specs`).
    pub(in crate::store::redis) async fn run_script(
        &self,
        call: &RedisDecision<'_>,
        g: &Group,
        specs: &[PlacedCharge<'_>],
        mode: Mode,
        refunds: &[Refund],
    ) -> Result<script::Reply, StoreError> {
        let quota = call.placed.quota_descriptors;
        // The attributes are made only when tracing is on: a decision pays nothing for them.
        let span = logging::child("redis EVALSHA", || {
            vec![
                KeyValue::new("db.system", "redis"),
                KeyValue::new("tollgate.keys", g.keys.len() as i64),
                KeyValue::new("tollgate.charges", g.charges.len() as i64),
                KeyValue::new("tollgate.mode", mode.name()),
            ]
        });
        let started = std::time::Instant::now();
        let record = mode.has_record().then(|| {
            let key = record_key_of(&specs[g.keys[0]].key, call.placed.slot);
            (key, record_life_us(g, specs) / 1000)
        });
        // Charges are made durable; losing a refund, a release or a dry run admits nothing.
        let wait = (self.opts.wait_replicas > 0
            && !matches!(
                mode,
                Mode::DryRun | Mode::Refund | Mode::Unreserve | Mode::Release
            ))
        .then(|| Wait {
            replicas: self.opts.wait_replicas,
            until: durable::until(call.retry_until),
        });
        if let Some(short) = wait
            .as_ref()
            .and_then(|w| self.short_of_replicas(w, &specs[g.keys[0]].key))
        {
            return Err(short);
        }
        let reply = self
            .script_call(call.retry_until, wait, || {
                let head = CallHead {
                    now: call.now,
                    mode,
                    quota_descriptors: quota,
                    slot: call.placed.slot,
                };
                let record = record.as_ref().map(|(key, ms)| (key.as_str(), *ms));
                args(g, specs, head, refunds, record)
            })
            .await;
        let op = if matches!(mode, Mode::Refund | Mode::Unreserve) {
            self.opts.metrics.refunds.inc();
            StoreOp::Refund
        } else {
            StoreOp::Decide
        };
        self.opts
            .metrics
            .store_duration(op, started.elapsed().as_secs_f64());
        let parsed = reply.and_then(|r| parse_reply(g, &r));
        logging::end(span, || match &parsed {
            Ok(r) => {
                let denied = r.answer.iter().filter(|(o, _)| !o.allowed).count();
                let landed = r.answer.iter().filter(|(_, l)| l.added > 0).count();
                vec![
                    KeyValue::new("tollgate.denied", denied as i64),
                    KeyValue::new("tollgate.landed", landed as i64),
                ]
            }
            Err(e) => vec![
                KeyValue::new("error.type", e.cause.kind()),
                KeyValue::new("tollgate.store_failure", e.to_string()),
            ],
        });
        parsed
    }

    /// Decides the request by the protocol. On an error, refunds what landed and reports
    /// the error.
    async fn decide(
        &self,
        placed: &Placed<'static>,
        mode: Mode,
        dry_first: bool,
        deadline: Instant,
    ) -> Result<Decided, StoreError> {
        let call = RedisDecision {
            placed,
            now: self.now_arg(),
            retry_until: deadline,
        };
        if self.opts.read_replicas
            && mode == Mode::Decide
            && placed.charges.iter().all(|s| s.cost == 0)
        {
            // Charges nothing: a dry run on replicas answers it (a replica that fails sends
            // it back to the primaries, below).
            if let Some(decided) = Box::pin(self.ask_replicas(&call)).await {
                return Ok(decided);
            }
        }
        if dry_first {
            // A limit is known exhausted: evaluate everything without charging, and answer
            // from that unless the cache was stale.
            let mut protocol = Protocol::new(placed, mode);
            let groups = 0..placed.groups.len();
            let replies = join_all(groups.map(|gi| self.run(&call, gi, Mode::DryRun, &[]))).await;
            for (gi, reply) in replies.into_iter().enumerate() {
                protocol.record(gi, reply?.answer);
            }
            if protocol.verdict() == Verdict::Deny {
                return Ok(Decided::nothing_landed(protocol.into_outcomes()));
            }
        }
        let mut protocol = Protocol::new(placed, mode);
        // The `now` each group ran at: a refund answers at the same time.
        let mut group_now: Vec<i64> = vec![0; placed.groups.len()];
        loop {
            let (runs, refunds) = match protocol.step() {
                Next::Run(runs) => (runs, Vec::new()),
                Next::Refund(refunds) => (Vec::new(), refunds),
                Next::Done => break,
            };
            let replies = if let [(gi, m)] = runs[..] {
                // One group (the common case): no join, which would move its future.
                vec![self.run(&call, gi, m, &[]).await]
            } else if refunds.is_empty() {
                join_all(
                    runs.iter()
                        .map(|&(gi, m)| Box::pin(self.run(&call, gi, m, &[]))),
                )
                .await
            } else {
                join_all(refunds.iter().map(|(gi, refunds)| {
                    self.refund_group(placed, *gi, refunds, group_now[*gi], mode)
                }))
                .await
            };
            let groups = runs
                .iter()
                .map(|&(gi, _)| gi)
                .chain(refunds.iter().map(|(gi, _)| *gi));
            let mut failure = None;
            for (gi, reply) in groups.zip(replies) {
                match reply {
                    Ok(r) => {
                        group_now[gi] = r.now;
                        protocol.record(gi, r.answer);
                    }
                    Err(e) if refunds.is_empty() => failure = Some(e),
                    // Logged by refund_group; the charge stays until its window passes.
                    Err(_) => protocol.abandon(gi),
                }
            }
            if let Some(e) = failure {
                let leftovers = with_now(protocol.refunds(None), &group_now);
                self.refund(placed, leftovers, mode).await;
                return Err(e);
            }
        }
        let (outcomes, landings) = protocol.into_parts();
        Ok(Decided {
            outcomes,
            landings,
            group_now,
        })
    }

    /// Gives back what a decision left landed (a held call whose caller went away).
    pub(in crate::store::redis) async fn give_back(&self, taken: Taken) {
        self.refund(&taken.placed, taken.leftovers, taken.mode)
            .await;
    }

    /// Refunds `leftovers` (per group, concurrently) of a request run in `mode`, ignoring the
    /// answers. A failure only logs: those charges then stay until their window passes
    /// (under-admitting, never over-admitting).
    pub(in crate::store::redis) async fn refund(
        &self,
        placed: &Placed<'static>,
        leftovers: Vec<(usize, Vec<Refund>, i64)>,
        mode: Mode,
    ) {
        let calls = leftovers
            .iter()
            .map(|(gi, refunds, now)| self.refund_group(placed, *gi, refunds, *now, mode));
        join_all(calls).await;
    }

    /// Refunds group `gi`'s landed charges (`refunds`) of a request run in `mode`, answering
    /// at `now`, the time the group ran at. A failure is logged here: the charge stays until
    /// its window passes.
    async fn refund_group(
        &self,
        placed: &Placed<'static>,
        gi: usize,
        refunds: &[Refund],
        now: i64,
        mode: Mode,
    ) -> Result<script::Reply, StoreError> {
        let call = RedisDecision {
            placed,
            now: Some(now),
            retry_until: Instant::now() + LATE_REPLY,
        };
        let reply = self.run(&call, gi, mode.refunding(), refunds).await;
        if let Err(e) = &reply {
            tracing::warn!(
                error = %e,
                "refunding a charge failed: it stays until its window passes"
            );
        }
        reply
    }
}

/// Attaches each group's `now` to its refunds.
fn with_now(
    refunds: Vec<(usize, Vec<Refund>)>,
    group_now: &[i64],
) -> Vec<(usize, Vec<Refund>, i64)> {
    refunds
        .into_iter()
        .map(|(gi, refunds)| (gi, refunds, group_now[gi]))
        .collect()
}

impl Inner {
    /// A group's call with `wait`, when its primary had fewer replicas connected than wanted at
    /// upkeep's last count: failed at once, before it charges anything (its `WAIT` could only
    /// fall short, and would hold the connection until its timeout meanwhile).
    pub(in crate::store::redis) fn short_of_replicas(
        &self,
        wait: &Wait,
        first_key: &str,
    ) -> Option<StoreError> {
        if !self.health.any_short() {
            // The common case: no routing table copied, nothing formatted.
            return None;
        }
        let (primary, place) = if self.clients.clustered {
            let node = durable::owner(self.clients.main(), redis_keyslot(first_key.as_bytes()))?;
            let name = format!("{}:{}", node.host, node.port);
            (Some(name.clone()), format!("redis {name}"))
        } else {
            (None, format!("redis {}", self.clients.host))
        };
        self.health.replicas_short(primary.as_deref())?;
        Some(StoreError::new(
            place,
            Cause::NotReplicated {
                acked: None,
                wanted: wait.replicas,
            },
        ))
    }
}
