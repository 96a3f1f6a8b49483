//! The Redis store: single node, Sentinel or Redis Cluster, through `fred`.
//!
//! A request follows the decision [`protocol`](crate::store::protocol) over its
//! [`placement`](crate::store::placement) groups. On one node a request is one group; on a
//! cluster every key of a group lives in one slot. Either way one `EVALSHA` of
//! `lua/tollgate.lua` decides and charges a group atomically ([`script`]). On a cluster,
//! descriptor groups run concurrently (one round trip for all of them), shared limits after
//! them, and a group that charged for a request that ends up denied takes its charges back
//! exactly. That can briefly under-admit, never over-admit.
//!
//! The caller waits for its decision up to the deadline; past it, or on any Redis error, the
//! caller applies the failure policy. A decision whose caller is gone (deadline, cancelled
//! call) goes on as a task of its own, collects its late replies and takes back whatever
//! landed, so a script that runs after its deadline leaves counters as if the request never
//! happened. [`health`] keeps readiness, topology and scripts current; the [`local_cache`]
//! lets the deny path of an exhausted key skip Redis.
//!
//! Every serving thread (see [`crate::serving`]) gets a client of its own, whose connections'
//! I/O runs on that thread: a call's script goes out, and its reply comes back, without waking
//! another thread; and the scripts of calls that arrive together leave as one `EVALSHA`
//! ([`batch`]), since fred writes every `EVALSHA` out on its own.

mod batch;
mod health;
mod lease;
mod local_cache;
mod migration;
mod script;
mod tls;
mod url;

use std::cell::RefCell;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::{
    ClusterDiscoveryPolicy, Config, Options, ReconnectPolicy, ReplicaConfig,
};
use fred::util::redis_keyslot;
use futures::future::join_all;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use self::lease::{Lean, Leases};
use self::local_cache::{LocalCache, Lookup};
use self::migration::Migrations;
use self::script::{args, eval, parse_reply, unpack, EvalError, Script};
use super::placement::{place, Group, Layout, Placed, Spec};
use super::protocol::{Mode, Next, Protocol, Undo};
use super::{ApplyMode, ChargeOutcome, Store, StoreError};
use crate::algorithm::Landing;
use crate::clock::Clock;
use crate::decision::Verdict;
use crate::metrics::{Metrics, StoreOp};
use crate::plan::Plan;
use crate::telemetry;
use opentelemetry::context::FutureExt;
use opentelemetry::KeyValue;

/// The format of keys and stored state; part of every key, so a tollgate that changes the
/// format never reads another format's state (during a rolling upgrade both count apart).
pub const KEY_FORMAT: &str = "v3:";

/// How long a decision whose caller has gone keeps waiting for Redis's late replies, to take
/// back what they charged.
const LATE_REPLY: Duration = Duration::from_secs(5);
/// How long a serving thread that stops waits to say QUIT on its connections.
const QUIT_WAIT: Duration = Duration::from_millis(500);

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
    /// How long opening one connection (TCP, TLS, AUTH) may take.
    pub connect_timeout: Duration,
    pub clock: ClockSource,
    /// Entries in the local over-limit cache; 0 disables it.
    pub local_cache_size: usize,
    /// Where the store counts (round trips, take-backs, cache hits).
    pub metrics: Arc<Metrics>,
    /// TLS: trust this CA (PEM) instead of the system's roots (`rediss://` URLs).
    pub ca_file: Option<PathBuf>,
    /// TLS: present this client certificate and key (PEM) for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Redis Cluster: answer requests that charge nothing (every cost 0) from replicas.
    pub read_replicas: bool,
}

pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Upkeep's client, and the one for calls made off the serving threads.
    client: Client,
    /// What every client is made from.
    recipe: Recipe,
    /// The serving threads' clients (upkeep probes and re-syncs them too).
    thread_clients: Mutex<Vec<Client>>,
    /// Tells this store's clients (and script batches) apart on a thread.
    id: u64,
    /// A Redis Cluster: script batches are per slot.
    clustered: bool,
    script: Script,
    opts: RedisOptions,
    /// `key_prefix` + [`KEY_FORMAT`].
    prefix: String,
    /// The URL's first host, for messages (never the password).
    host: String,
    ready: AtomicBool,
    /// Why the store is not ready, when it is not.
    reason: Mutex<Option<String>>,
    /// The last connection error fred reported, described (cleared once Redis answers).
    connection_error: Arc<Mutex<Option<String>>>,
    /// A risk worth showing while ready (an evicting `maxmemory-policy`).
    eviction_warning: Mutex<Option<String>>,
    /// Upkeep rounds so far (`maintain` runs about twice a second).
    ticks: AtomicU64,
    cache: LocalCache,
    /// Units of leased shared limits this instance holds ([`lease`]).
    leases: Leases,
    /// Slots seen migrating between primaries, and where each is imported.
    migrations: Migrations,
    /// The instance clock, for the local cache.
    wall: Arc<dyn Clock>,
}

/// The settings a client is made from.
struct Recipe {
    config: Config,
    perf: PerformanceConfig,
    conn: ConnectionConfig,
    policy: ReconnectPolicy,
}

impl Recipe {
    fn client(&self) -> Client {
        Client::new(
            self.config.clone(),
            Some(self.perf.clone()),
            Some(self.conn.clone()),
            Some(self.policy.clone()),
        )
    }
}

thread_local! {
    /// On a serving thread: its client of each Redis store (by store id; one in practice).
    static THREAD_CLIENTS: RefCell<Vec<(u64, Client)>> = const { RefCell::new(Vec::new()) };
}

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(0);

/// What every script call of one request shares.
struct Call<'a> {
    placed: &'a Placed<'static>,
    /// The script's `now` (µs); `None`: the script reads Redis `TIME`.
    now: Option<i64>,
    /// TRYAGAIN / CLUSTERDOWN are retried until then.
    retry_until: Instant,
}

/// A decision's answers, and what it left in Redis.
struct Decided {
    outcomes: Vec<ChargeOutcome>,
    /// What is left to take back if the caller gives up: per group, its undos and the `now`
    /// it ran at.
    leftovers: Vec<(usize, Vec<Undo>, i64)>,
}

/// A decision in progress that must not stop halfway: a script call it awaits may already
/// have charged, and a batch it opened must still be sent. Dropped before it finished, it
/// finishes as a task of its own (which then takes back what it charged, since nobody waits
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

impl Store for RedisStore {
    async fn apply(
        &self,
        plan: &Plan<'_>,
        mode: ApplyMode,
    ) -> Result<Vec<ChargeOutcome>, StoreError> {
        let inner = &self.inner;
        let layout = if inner.clustered {
            Layout::ByTag
        } else {
            Layout::OneNode
        };
        let placed = place(plan, &inner.prefix, layout).into_owned();
        let mut dry_first = false;
        if !mode.count_rejected {
            match inner.cache.lookup(&placed, inner.wall.now_us()) {
                Lookup::AllExhausted(outcomes) => {
                    inner.opts.metrics.local_cache_hits.inc();
                    return Ok(outcomes);
                }
                Lookup::SomeExhausted => dry_first = true,
                Lookup::Miss => {}
            }
        }
        let deadline = Instant::now() + inner.opts.timeout;
        let (tx, rx) = oneshot::channel();
        let task = inner.clone();
        let decision = async move {
            match task.decide(&placed, mode, dry_first, deadline).await {
                Ok(decided) => {
                    task.cache
                        .remember(&placed, &decided.outcomes, task.wall.now_us());
                    if let Err(Ok(decided)) = tx.send(Ok(decided)) {
                        // The caller gave up: nothing of this request may stay.
                        task.take_back(&placed, decided.leftovers).await;
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
            trace: telemetry::enabled().then(opentelemetry::Context::current),
        };
        let running = decision.decision.as_mut().expect("not detached yet");
        match tokio::time::timeout_at(deadline, running).await {
            Ok(()) => {
                decision.decision = None;
                match rx.await {
                    Ok(result) => result.map(|d| d.outcomes),
                    Err(_) => Err(StoreError("redis decision failed".into())),
                }
            }
            Err(_) => Err(StoreError(format!(
                "redis did not answer within {:?}",
                inner.opts.timeout
            ))),
        }
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Relaxed)
    }

    fn reason(&self) -> Option<String> {
        self.inner.reason.lock().clone()
    }

    fn warning(&self) -> Option<String> {
        self.inner.eviction_warning.lock().clone()
    }

    async fn maintain(&self) {
        self.inner.upkeep().await;
        self.inner.leases.forget_lapsed(self.inner.leases.now());
    }

    async fn close(&self) {
        self.inner.give_back_leases().await;
    }

    async fn serve_thread<F: Future>(&self, serve: F) -> F::Output {
        let inner = &self.inner;
        let client = inner.recipe.client();
        client.connect();
        THREAD_CLIENTS.with_borrow_mut(|c| c.push((inner.id, client.clone())));
        inner.thread_clients.lock().push(client.clone());
        let out = serve.await;
        THREAD_CLIENTS.with_borrow_mut(|c| c.retain(|(id, _)| *id != inner.id));
        inner
            .thread_clients
            .lock()
            .retain(|c| c.id() != client.id());
        // A client still connecting would hold QUIT until it connected (or for LATE_REPLY):
        // dropping the thread's runtime, next, stops it all the same.
        if client.is_connected() {
            let _ = tokio::time::timeout(QUIT_WAIT, client.quit()).await;
        }
        out
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
        let tls_wanted = opts.ca_file.is_some() || opts.client_cert.is_some();
        if tls_wanted {
            if config.tls.is_none() {
                return Err("--redis-ca-file and --redis-client-cert need a rediss:// URL".into());
            }
            config.tls = Some(
                tls::config(
                    opts.ca_file.as_deref(),
                    opts.client_cert
                        .as_ref()
                        .map(|(c, k)| (c.as_path(), k.as_path())),
                )?
                .into(),
            );
        }
        // Topology comes from every node fred has seen, not only the URL's seeds: a seed that
        // dies for good must not take the store down.
        if config.server.is_clustered() {
            config
                .server
                .set_cluster_discovery_policy(ClusterDiscoveryPolicy::UseCache)
                .map_err(|e| format!("redis cluster discovery: {e}"))?;
        }
        let host = url::first_host(&opts.url);
        let clustered = config.server.is_clustered();
        if opts.read_replicas && !clustered {
            return Err(
                "--read-replicas needs a redis-cluster:// URL (replicas are found from the cluster's topology)"
                    .into(),
            );
        }
        // fred's default `fail_fast` gives up on the first connection attempt and never
        // reconnects when Redis was down at start; commands fail fast per call instead.
        config.fail_fast = false;
        let perf = PerformanceConfig {
            default_command_timeout: LATE_REPLY,
            ..Default::default()
        };
        let conn = ConnectionConfig {
            connection_timeout: opts.connect_timeout,
            internal_command_timeout: opts.connect_timeout,
            max_command_attempts: 1,
            // fred follows no redirect: `script::eval` follows MOVED and ASK itself (fred's
            // ASK handling sends the command back to the source; see `migration`). fred still
            // re-reads the topology on MOVED. 0 here, since 0 per call means "the default".
            max_redirections: 0,
            // Replica connections open on first use; a replica that cannot be reached falls
            // back to its primary.
            replica: ReplicaConfig {
                lazy_connections: true,
                ignore_reconnection_errors: true,
                primary_fallback: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let recipe = Recipe {
            config,
            perf,
            conn,
            // Backoff capped at 200 ms: every serving thread's client reconnects on its own,
            // and with a 1 s cap one could sit out most of a second after a failover that the
            // others had already followed (seen as calls failing after decisions resumed).
            policy: ReconnectPolicy::new_exponential(0, 50, 200, 2),
        };
        let client = recipe.client();
        client.connect();
        let connection_error = Arc::new(Mutex::new(None));
        let mut errors = client.error_rx();
        let (seen, fallback) = (connection_error.clone(), host.clone());
        tokio::spawn(async move {
            while let Ok((e, server)) = errors.recv().await {
                *seen.lock() = Some(health::describe(&e, server.as_ref(), &fallback));
            }
        });
        Ok(RedisStore {
            inner: Arc::new(Inner {
                host,
                reason: Mutex::new(Some("connecting to redis".into())),
                connection_error,
                eviction_warning: Mutex::new(None),
                script: Script::tollgate(),
                cache: LocalCache::new(opts.local_cache_size),
                leases: Leases::new(match &opts.clock {
                    ClockSource::Local(c) => Some(c.clone()),
                    ClockSource::Redis => None,
                }),
                migrations: Migrations::default(),
                prefix: format!("{}{KEY_FORMAT}", opts.key_prefix),
                client,
                recipe,
                thread_clients: Mutex::new(Vec::new()),
                id: NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed),
                clustered,
                opts,
                ready: AtomicBool::new(false),
                ticks: AtomicU64::new(0),
                wall,
            }),
        })
    }
}

impl Inner {
    /// The client for a call on this thread: the serving thread's own once it is connected,
    /// else the main one. (A thread's client connects in the background when its thread
    /// starts, and readiness follows the main client: a call that came before the thread's
    /// client had its cluster routing failed with "Missing cluster routing state".)
    fn client(&self) -> Client {
        THREAD_CLIENTS
            .with_borrow(|c| {
                c.iter()
                    .find(|(id, c)| *id == self.id && c.is_connected())
                    .map(|(_, c)| c.clone())
            })
            .unwrap_or_else(|| self.client.clone())
    }

    /// Every client: the main one first, then the serving threads'.
    fn clients(&self) -> Vec<Client> {
        let mut all = vec![self.client.clone()];
        all.extend(self.thread_clients.lock().iter().cloned());
        all
    }

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

    fn now_arg(&self) -> Option<i64> {
        match &self.opts.clock {
            ClockSource::Redis => None,
            ClockSource::Local(c) => Some(c.now_us() as i64),
        }
    }

    /// One script call: batched with the calls that arrive with it on a serving thread
    /// ([`batch`]), else on its own.
    async fn script_call(
        &self,
        retry_until: Instant,
        request: impl Fn() -> (Vec<Key>, Value),
    ) -> Result<Vec<i64>, StoreError> {
        if !batch::here() {
            let (client, options) = (self.client(), self.call_options());
            // Boxed: this rare path would otherwise size every call's future.
            let call = eval(
                &client,
                &options,
                &self.script,
                &self.migrations,
                retry_until,
                || {
                    let (keys, arg) = request();
                    (keys, vec![arg])
                },
            );
            let reply: Value = Box::pin(call).await?;
            return unpack(&reply);
        }
        let (keys, arg) = request();
        let slot = match keys.first() {
            Some(k) if self.clustered => redis_keyslot(k.as_bytes()),
            _ => 0,
        };
        let (reply, opened) = batch::join(self.id, slot, keys, arg, retry_until);
        if let Some(opened) = opened {
            // This call sends the batch it opened, once every task ready on this thread has
            // run (and could join). A call is never cancelled halfway: a decision whose caller
            // stops waiting finishes on its own (see `Detach`). Boxed: the rare retry paths
            // would size every call.
            tokio::task::yield_now().await;
            Box::pin(self.send_batch(opened)).await;
        }
        reply
            .await
            .unwrap_or_else(|_| Err(StoreError("redis batch dropped before it was sent".into())))
    }

    /// Sends a batch of script calls (see [`batch`]) once the calls ready on this thread
    /// have joined it.
    async fn send_batch(&self, batch: batch::Batch) {
        let mut calls = batch::take(&batch);
        let (client, options) = (self.client(), self.call_options());
        if calls.len() == 1 {
            let call = calls.pop().expect("one call");
            return self.send_alone(&client, &options, call).await;
        }
        // Tried once (NOSCRIPT aside): on a cluster, a slot being migrated refuses a script
        // whose keys are only partly moved (TRYAGAIN), which a batch, with more keys, meets
        // more often than its calls would. Refused, nothing of it ran: its calls are then sent
        // on their own, each retried and redirected as usual.
        let (keys, args) = batch::combine(&calls);
        let reply = eval(
            &client,
            &options,
            &self.script,
            &self.migrations,
            Instant::now(),
            || (keys.clone(), args.clone()),
        )
        .await;
        match reply {
            Err(EvalError::NotRun(_)) => {
                let alone = calls
                    .into_iter()
                    .map(|call| self.send_alone(&client, &options, call));
                join_all(alone).await;
            }
            reply => batch::answer(calls, reply.map_err(StoreError::from)),
        }
    }

    /// Sends one call of a batch as a plain call, retried until its own deadline.
    async fn send_alone(&self, client: &Client, options: &Options, call: batch::Call) {
        let reply = eval(
            client,
            options,
            &self.script,
            &self.migrations,
            call.retry_until,
            || (call.keys.clone(), vec![call.arg.clone()]),
        )
        .await;
        call.answer(
            reply
                .map_err(StoreError::from)
                .and_then(|r: Value| unpack(&r)),
        );
    }

    /// Runs one group: by its script, or, for a group of leased shared limits, from this
    /// instance's leases where they cover it ([`lease`]).
    async fn run(
        &self,
        call: &Call<'_>,
        gi: usize,
        mode: Mode,
        undo: &[Undo],
    ) -> Result<script::Reply, StoreError> {
        let placed = call.placed;
        let g = &placed.groups[gi];
        if g.shared && lease::leased(g, &placed.specs) {
            // Boxed: only leased groups pay for this path's future.
            return Box::pin(self.run_leased(call, g, mode, undo)).await;
        }
        self.run_script(call, g, &placed.specs, mode, undo).await
    }

    /// Runs a group of leased shared limits.
    async fn run_leased(
        &self,
        call: &Call<'_>,
        g: &Group,
        mode: Mode,
        undo: &[Undo],
    ) -> Result<script::Reply, StoreError> {
        let specs = &call.placed.specs;
        let metrics = &self.opts.metrics;
        match mode {
            Mode::Decide => match self.leases.spend(g, specs, self.leases.now(), true) {
                Lean::Local(answer, now) => {
                    metrics.lease_local.inc_by(answer.len() as u64);
                    return Ok(script::Reply { now, answer });
                }
                Lean::TopUp(top) => {
                    let ci = g.charges[0];
                    let mut spec = specs[ci].clone();
                    spec.cost += top;
                    let one = Group {
                        keys: vec![0],
                        charges: vec![0],
                        key_of: vec![0],
                        shared: true,
                    };
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
                                return Ok(script::Reply { now, answer });
                            }
                        }
                    }
                }
                Lean::Exact => {}
            },
            Mode::TakeBack => match self.leases.take_back(g, specs, undo, self.leases.now()) {
                lease::TakenBack::Here(answer) => {
                    let now = call.now.unwrap_or(0);
                    return Ok(script::Reply { now, answer });
                }
                lease::TakenBack::InRedis { rest, to_lease } => {
                    let mut reply = self.run_script(call, g, specs, mode, &rest).await?;
                    for ((_, kept), back) in reply.answer.iter_mut().zip(to_lease) {
                        if back {
                            *kept = Landing::default();
                        }
                    }
                    return Ok(reply);
                }
            },
            Mode::CountRejected | Mode::DryRun => {}
        }
        self.run_script(call, g, specs, mode, undo).await
    }

    /// Runs a group's script (`g`'s charges index `specs`).
    async fn run_script(
        &self,
        call: &Call<'_>,
        g: &Group,
        specs: &[Spec<'_>],
        mode: Mode,
        undo: &[Undo],
    ) -> Result<script::Reply, StoreError> {
        let quota = call.placed.quota_descriptors;
        let span = telemetry::child(
            "redis EVALSHA",
            vec![
                KeyValue::new("db.system", "redis"),
                KeyValue::new("tollgate.keys", g.keys.len() as i64),
                KeyValue::new("tollgate.charges", g.charges.len() as i64),
                KeyValue::new("tollgate.mode", mode.name()),
            ],
        );
        let started = std::time::Instant::now();
        let reply = self
            .script_call(call.retry_until, || {
                args(g, specs, call.now, mode, quota, undo)
            })
            .await;
        let op = if mode == Mode::TakeBack {
            self.opts.metrics.refunds.inc();
            StoreOp::TakeBack
        } else {
            StoreOp::Decide
        };
        self.opts
            .metrics
            .store_duration(op, started.elapsed().as_secs_f64());
        let parsed = reply.and_then(|r| parse_reply(g, &r));
        telemetry::end(span, || match &parsed {
            Ok(r) => {
                let denied = r.answer.iter().filter(|(o, _)| !o.allowed).count();
                let landed = r.answer.iter().filter(|(_, l)| l.added > 0).count();
                vec![
                    KeyValue::new("tollgate.denied", denied as i64),
                    KeyValue::new("tollgate.landed", landed as i64),
                ]
            }
            Err(e) => vec![KeyValue::new("error.type", e.to_string())],
        });
        parsed
    }

    /// Answers a request that charges nothing from replicas: every group a dry run. `None`
    /// when a replica could not answer (the caller asks the primaries).
    async fn ask_replicas(&self, call: &Call<'_>) -> Option<Decided> {
        let placed = call.placed;
        let quota = placed.quota_descriptors;
        let client = self.client();
        let options = self.call_options();
        let replies = join_all(placed.groups.iter().map(|g| {
            let (client, options) = (&client, &options);
            async move {
                let (keys, arg) = args(g, &placed.specs, call.now, Mode::DryRun, quota, &[]);
                let started = std::time::Instant::now();
                let reply =
                    script::eval_replica(client, options, &self.script, keys, vec![arg]).await;
                self.opts
                    .metrics
                    .store_duration(StoreOp::Decide, started.elapsed().as_secs_f64());
                reply
                    .and_then(|r| unpack(&r))
                    .and_then(|r| parse_reply(g, &r))
            }
        }))
        .await;
        let mut protocol = Protocol::new(placed, false);
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
        Some(Decided {
            outcomes: protocol.into_outcomes(),
            leftovers: Vec::new(),
        })
    }

    /// Decides the request by the protocol. On an error, takes back what landed and reports
    /// the error.
    async fn decide(
        &self,
        placed: &Placed<'static>,
        mode: ApplyMode,
        dry_first: bool,
        deadline: Instant,
    ) -> Result<Decided, StoreError> {
        let call = Call {
            placed,
            now: self.now_arg(),
            retry_until: deadline,
        };
        if self.opts.read_replicas
            && !mode.count_rejected
            && placed.specs.iter().all(|s| s.cost == 0)
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
            let mut protocol = Protocol::new(placed, mode.count_rejected);
            let groups = 0..placed.groups.len();
            let replies = join_all(groups.map(|gi| self.run(&call, gi, Mode::DryRun, &[]))).await;
            for (gi, reply) in replies.into_iter().enumerate() {
                protocol.record(gi, reply?.answer);
            }
            if protocol.verdict() == Verdict::Deny {
                return Ok(Decided {
                    outcomes: protocol.into_outcomes(),
                    leftovers: Vec::new(),
                });
            }
        }
        let mut protocol = Protocol::new(placed, mode.count_rejected);
        // The `now` each group ran at: a take-back answers at the same time.
        let mut group_now: Vec<i64> = vec![0; placed.groups.len()];
        loop {
            let (runs, undos) = match protocol.step() {
                Next::Run(runs) => (runs, Vec::new()),
                Next::TakeBack(undos) => (Vec::new(), undos),
                Next::Done => break,
            };
            let replies = if let [(gi, m)] = runs[..] {
                // One group (the common case): no join, which would move its future.
                vec![self.run(&call, gi, m, &[]).await]
            } else if undos.is_empty() {
                join_all(
                    runs.iter()
                        .map(|&(gi, m)| Box::pin(self.run(&call, gi, m, &[]))),
                )
                .await
            } else {
                join_all(undos.iter().map(|(gi, undo)| {
                    let now = group_now[*gi];
                    async move {
                        let call = Call {
                            placed,
                            now: Some(now),
                            retry_until: Instant::now() + LATE_REPLY,
                        };
                        self.run(&call, *gi, Mode::TakeBack, undo).await
                    }
                }))
                .await
            };
            let groups = runs
                .iter()
                .map(|&(gi, _)| gi)
                .chain(undos.iter().map(|(gi, _)| *gi));
            let mut failure = None;
            for (gi, reply) in groups.zip(replies) {
                match reply {
                    Ok(r) => {
                        group_now[gi] = r.now;
                        protocol.record(gi, r.answer);
                    }
                    Err(e) if undos.is_empty() => failure = Some(e),
                    Err(e) => {
                        tracing::warn!(
                            error = %e,
                            "taking back a charge failed: it stays until its window passes"
                        );
                        protocol.abandon(gi);
                    }
                }
            }
            if let Some(e) = failure {
                let leftovers = with_now(protocol.undos(None), &group_now);
                self.take_back(placed, leftovers).await;
                return Err(e);
            }
        }
        let leftovers = with_now(protocol.undos(None), &group_now);
        Ok(Decided {
            outcomes: protocol.into_outcomes(),
            leftovers,
        })
    }

    /// Takes back `leftovers` (per group, concurrently), ignoring the answers. A failure only
    /// logs: those charges then stay until their window passes (under-admitting, never
    /// over-admitting).
    async fn take_back(&self, placed: &Placed<'static>, leftovers: Vec<(usize, Vec<Undo>, i64)>) {
        let calls = leftovers.into_iter().map(|(gi, undo, now)| async move {
            let call = Call {
                placed,
                now: Some(now),
                retry_until: Instant::now() + LATE_REPLY,
            };
            if let Err(e) = self.run(&call, gi, Mode::TakeBack, &undo).await {
                tracing::warn!(
                    error = %e,
                    "taking back a charge failed: it stays until its window passes"
                );
            }
        });
        join_all(calls).await;
    }
}

impl Inner {
    /// Gives every unspent leased unit of a running window back to Redis (on shutdown), so
    /// the other instances can use it; waits at most the decision deadline.
    async fn give_back_leases(&self) {
        let unspent = self.leases.drain(self.leases.now());
        if unspent.is_empty() {
            return;
        }
        let calls = unspent.into_iter().map(|u| async move {
            let placed = Placed {
                specs: vec![Spec {
                    key: u.key.into(),
                    params: u.params,
                    cost: u.units,
                    role: crate::plan::Role::Enforced,
                    lease: 0,
                }],
                groups: vec![Group {
                    keys: vec![0],
                    charges: vec![0],
                    key_of: vec![0],
                    shared: true,
                }],
                quota_descriptors: 0,
            };
            let undo = Undo {
                allowed: true,
                landing: Landing {
                    added: u.units,
                    mark: (u.mark, 0),
                },
                take_back: true,
            };
            let call = Call {
                placed: &placed,
                now: self.now_arg(),
                retry_until: Instant::now() + self.opts.timeout,
            };
            let g = &placed.groups[0];
            match self
                .run_script(&call, g, &placed.specs, Mode::TakeBack, &[undo])
                .await
            {
                Ok(_) => tracing::debug!(units = u.units, "gave back a lease"),
                Err(e) => tracing::warn!(
                    error = %e,
                    units = u.units,
                    "giving back a lease failed: its units stay counted until its window ends"
                ),
            }
        });
        let _ = tokio::time::timeout(self.opts.timeout, join_all(calls)).await;
    }
}

/// Attaches each group's `now` to its undos.
fn with_now(undos: Vec<(usize, Vec<Undo>)>, group_now: &[i64]) -> Vec<(usize, Vec<Undo>, i64)> {
    undos
        .into_iter()
        .map(|(gi, undo)| (gi, undo, group_now[gi]))
        .collect()
}
