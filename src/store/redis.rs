//! The Redis store: single node, Sentinel or Redis Cluster, through `fred`.
//!
//! A request's charges are split into placement groups by hash tag (see `plan`): every key of
//! a group lives in one slot, so one `EVALSHA` of `lua/decide.lua` decides and charges the
//! group atomically. Descriptor groups run concurrently (one round trip for all of them), then
//! shared limits in a fixed order (one round trip each); once a group denies, the shared ones
//! only evaluate (dry run) and charge nothing. When the request is denied after a group
//! charged, `lua/refund.lua` undoes exactly that group's charges. That can briefly
//! under-admit, never over-admit.
//!
//! Every call has a deadline; past it, or on any Redis error, the caller applies the failure
//! policy. A background task pings every primary to drive readiness, re-syncs the cluster
//! topology and reloads scripts after changes. A local cache remembers limits known to be
//! exhausted until a time, so the deny path can skip Redis.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::{Options, ReconnectPolicy};
use futures::future::join_all;

use super::local_cache::LocalCache;
use super::{ApplyMode, Outcome, Store, StoreError};
use crate::algorithm::{batch_verdict, BatchVerdict, Role};
use crate::clock::Clock;
use crate::limit::Algorithm;
use crate::plan::Charge;

/// A cached denial is re-checked with Redis at least this often: a denial can rest on another
/// request's charge that a refund is about to undo, and must not outlive it by a whole window.
const CACHE_RECHECK_US: u64 = 1_000_000;

/// Upkeep rounds between periodic cluster topology syncs (about ten seconds).
const SYNC_EVERY_TICKS: u64 = 20;

const DECIDE_LUA: &str = include_str!("../../lua/decide.lua");
const REFUND_LUA: &str = include_str!("../../lua/refund.lua");

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
    decide_sha: String,
    refund_sha: String,
    opts: RedisOptions,
    ready: Arc<AtomicBool>,
    /// Upkeep rounds so far (`maintain` runs about twice a second).
    ticks: AtomicU64,
    cache: LocalCache,
    /// The instance clock, for the local cache.
    wall: Arc<dyn Clock>,
}

/// Turns tollgate's URL forms into fred's.
fn fred_config(url: &str) -> Result<Config, String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        "redis URL must start with redis://, rediss://, redis-cluster:// or redis-sentinel://"
            .to_string()
    })?;
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (format!("{a}@"), r),
        None => (String::new(), rest),
    };
    let (hosts, path) = match rest.split_once('/') {
        Some((h, p)) => (h, p),
        None => (rest, ""),
    };
    let mut hosts = hosts.split(',').filter(|h| !h.is_empty());
    let first = hosts.next().ok_or("redis URL names no host")?;
    let others: Vec<String> = hosts.map(|h| format!("node={h}")).collect();
    let fred_url = match scheme {
        "redis" | "rediss" => format!("{scheme}://{auth}{first}/{path}"),
        "redis-cluster" | "rediss-cluster" => {
            let q = if others.is_empty() {
                String::new()
            } else {
                format!("?{}", others.join("&"))
            };
            format!("{scheme}://{auth}{first}{q}")
        }
        "redis-sentinel" | "rediss-sentinel" => {
            let (service, db) = match path.split_once('/') {
                Some((s, d)) => (s, d),
                None => (path, ""),
            };
            if service.is_empty() {
                return Err("redis-sentinel:// URL needs the service name: redis-sentinel://host:port[,host:port]/service[/db]".into());
            }
            let mut q = vec![format!("sentinelServiceName={service}")];
            q.extend(others);
            format!("{scheme}://{auth}{first}/{db}?{}", q.join("&"))
        }
        other => return Err(format!("unsupported redis URL scheme '{other}'")),
    };
    // fred's messages may quote the URL; ours never carries the password out.
    Config::from_url(&fred_url).map_err(|e| format!("invalid redis URL ({:?})", e.kind()))
}

impl RedisStore {
    /// Creates the client and starts connecting in the background: the store is not ready
    /// until Redis answers, and keeps retrying with backoff while it does not.
    pub fn connect(opts: RedisOptions, wall: Arc<dyn Clock>) -> Result<RedisStore, String> {
        if opts.key_prefix.contains(['{', '}']) {
            return Err("--redis-key-prefix must not contain '{' or '}'".into());
        }
        let mut config = fred_config(&opts.url)?;
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
        let store = RedisStore {
            decide_sha: fred::util::sha1_hash(DECIDE_LUA),
            refund_sha: fred::util::sha1_hash(REFUND_LUA),
            cache: LocalCache::new(opts.local_cache_size),
            client,
            opts,
            ready: Arc::new(AtomicBool::new(false)),
            ticks: AtomicU64::new(0),
            wall,
        };
        Ok(store)
    }

    fn call_options(&self) -> Options {
        Options {
            timeout: Some(self.opts.timeout),
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        }
    }

    /// `EVALSHA`, loading the script on every primary and retrying once on NOSCRIPT; retries
    /// TRYAGAIN / CLUSTERDOWN (resharding, failover) until the caller's deadline.
    async fn eval(
        &self,
        sha: &str,
        lua: &str,
        request: impl Fn() -> (Vec<Key>, Vec<Value>),
    ) -> Result<Vec<i64>, StoreError> {
        let mut loaded = false;
        loop {
            // Built per attempt: a retry is rare, and the first attempt moves its buffers.
            let (keys, args) = request();
            let res: Result<Vec<i64>, Error> = self
                .client
                .with_options(&self.call_options())
                .evalsha(sha, keys, args)
                .await;
            match res {
                Ok(v) => return Ok(v),
                Err(e) if e.details().starts_with("NOSCRIPT") && !loaded => {
                    loaded = true;
                    self.client
                        .script_load_cluster::<(), _>(lua)
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

    /// KEYS and ARGV of `lua/decide.lua` for one group; `script_mode` 0 decide, 1 count
    /// rejected, 2 dry run.
    fn group_request(
        &self,
        g: &Group,
        charges: &[Charge<'_>],
        now_arg: &Value,
        script_mode: i64,
        quota_total: usize,
    ) -> (Vec<Key>, Vec<Value>) {
        let keys: Vec<Key> = g
            .keys
            .iter()
            .map(|k| Key::from(format!("{}{}", self.opts.key_prefix, k)))
            .collect();
        let mut args: Vec<Value> = Vec::with_capacity(4 + g.charges.len() * 8);
        args.push(now_arg.clone());
        args.push(Value::Integer(script_mode));
        args.push(Value::Integer(quota_total as i64));
        args.push(Value::Integer(g.charges.len() as i64));
        for (&ci, &slot) in g.charges.iter().zip(&g.slots) {
            let c = &charges[ci];
            let p = &c.limit.params;
            args.push(Value::Integer(slot as i64 + 1));
            args.push(Value::from_static_str(p.algorithm.tag()));
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

    fn now_arg(&self) -> Value {
        match &self.opts.clock {
            ClockSource::Redis => Value::from_static_str(""),
            ClockSource::Local(c) => Value::Integer(c.now_us() as i64),
        }
    }

    /// Decides every group; returns the outcomes and the refunds owed (charge indexes and the
    /// `now` their group charged at).
    async fn apply_groups(
        &self,
        charges: &[Charge<'_>],
        mode: ApplyMode,
    ) -> Result<(Vec<Outcome>, Vec<(Vec<usize>, i64)>), StoreError> {
        let groups = placement_groups(charges);
        let quota_total = quota_descriptors(charges);
        let now_arg = self.now_arg();
        let mut outcomes = vec![
            Outcome {
                allowed: true,
                remaining: 0,
                wait_us: None,
            };
            charges.len()
        ];
        let mut landed = vec![false; charges.len()];
        // The `now` each group ran at (for refunds); `None` for a group that did not run.
        let mut group_now: Vec<Option<i64>> = vec![None; groups.len()];
        let mut record = |gi: usize, reply: Vec<i64>| -> Result<bool, StoreError> {
            let g = &groups[gi];
            if reply.len() != 1 + 4 * g.charges.len() {
                return Err(StoreError(format!(
                    "unexpected script reply of {} values",
                    reply.len()
                )));
            }
            group_now[gi] = Some(reply[0]);
            let mut denied = false;
            for (i, &ci) in g.charges.iter().enumerate() {
                let r = &reply[1 + 4 * i..5 + 4 * i];
                outcomes[ci] = Outcome {
                    allowed: r[0] == 1,
                    remaining: r[1].max(0) as u64,
                    wait_us: (r[2] >= 0).then_some(r[2] as u64),
                };
                landed[ci] = r[3] == 1;
                let c = &charges[ci];
                denied |= r[0] == 0 && c.role == Role::Enforced && !c.limit.params.overdraft;
            }
            Ok(denied)
        };
        let (groups_ref, now_ref) = (&groups, &now_arg);
        let decide = |gi: usize, dry: bool| {
            let script_mode = if dry { 2 } else { mode.count_rejected as i64 };
            self.eval(&self.decide_sha, DECIDE_LUA, move || {
                self.group_request(&groups_ref[gi], charges, now_ref, script_mode, quota_total)
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
            let verdict = batch_verdict(
                charges
                    .iter()
                    .zip(&outcomes)
                    .map(|(c, o)| (c.role, c.limit.params.overdraft, o.allowed)),
            );
            let undo = |c: &Charge<'_>| match verdict {
                BatchVerdict::Admit => false,
                BatchVerdict::OverdraftOnly => !c.limit.params.overdraft,
                BatchVerdict::Deny => true,
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
                refunds.push((refund, now));
            }
        }
        Ok((outcomes, refunds))
    }

    /// Undoes charges of one group. A failure only logs: the charges then stay until their
    /// window passes (under-admitting, never over-admitting).
    async fn refund(&self, refund: &[usize], charges: &[Charge<'_>], now: i64) {
        let mut keys: Vec<Key> = Vec::new();
        let mut args = vec![Value::Integer(now), Value::Integer(refund.len() as i64)];
        for &ci in refund {
            let c = &charges[ci];
            let key = Key::from(format!("{}{}", self.opts.key_prefix, c.key));
            let slot = match keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    keys.push(key);
                    keys.len() - 1
                }
            };
            let p = &c.limit.params;
            args.extend([
                Value::Integer(slot as i64 + 1),
                Value::from_static_str(p.algorithm.tag()),
                Value::Integer(p.limit as i64),
                Value::Integer(p.window_us as i64),
                Value::Integer(c.cost.min(i64::MAX as u64) as i64),
            ]);
        }
        let res = tokio::time::timeout(
            self.opts.timeout,
            self.eval(&self.refund_sha, REFUND_LUA, || {
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

    /// Answers from the local over-limit cache when an enforced limit is known to be
    /// exhausted: then the request is denied and nothing may be charged, so Redis is skipped.
    fn deny_from_cache(&self, charges: &[Charge<'_>], mode: ApplyMode) -> Option<Vec<Outcome>> {
        if mode.count_rejected || !self.cache.enabled() {
            return None;
        }
        let now = self.wall.now_us();
        let mut hit = false;
        let outcomes: Vec<Outcome> = charges
            .iter()
            .map(|c| {
                let until = (c.role == Role::Enforced && !c.limit.params.overdraft)
                    .then(|| self.cache.exhausted_until(&c.key, &c.limit.params, now))
                    .flatten();
                match until {
                    Some(t) => {
                        hit = true;
                        Outcome {
                            allowed: false,
                            remaining: 0,
                            wait_us: Some(t - now),
                        }
                    }
                    // Not evaluated: the request is denied anyway.
                    None => Outcome {
                        allowed: true,
                        remaining: 0,
                        wait_us: None,
                    },
                }
            })
            .collect();
        hit.then_some(outcomes)
    }

    fn remember_exhausted(&self, charges: &[Charge<'_>], outcomes: &[Outcome]) {
        if !self.cache.enabled() {
            return;
        }
        let now = self.wall.now_us();
        for (c, o) in charges.iter().zip(outcomes) {
            let p = &c.limit.params;
            // Exhausted for any cost: nothing left, and the wait is until one unit fits.
            let wait_fits_one = p.algorithm == Algorithm::FixedWindow || c.cost <= 1;
            if !o.allowed
                && o.remaining == 0
                && !p.overdraft
                && c.role == Role::Enforced
                && wait_fits_one
            {
                if let Some(w) = o.wait_us.filter(|&w| w > 0) {
                    self.cache
                        .insert(&c.key, p, now, now + CACHE_RECHECK_US, now + w);
                }
            }
        }
    }

    /// Pings every primary; re-syncs the topology when one does not answer.
    async fn probe(&self) -> bool {
        let timeout = Duration::from_millis(500);
        let opts = |server: Option<Server>| Options {
            timeout: Some(timeout),
            fail_fast: true,
            max_attempts: Some(1),
            cluster_node: server,
            ..Default::default()
        };
        if !self.client.is_clustered() {
            let pong: Result<String, Error> =
                self.client.with_options(&opts(None)).ping(None).await;
            return pong.is_ok();
        }
        let primaries = self.primaries();
        let mut ok = !primaries.is_empty();
        for server in primaries {
            let pong: Result<String, Error> = self
                .client
                .with_options(&opts(Some(server)))
                .ping(None)
                .await;
            ok &= pong.is_ok();
        }
        if !ok {
            let _ = tokio::time::timeout(timeout, self.client.sync_cluster()).await;
        }
        ok
    }

    /// The primaries as fred last saw them (empty for a single node).
    fn primaries(&self) -> Vec<Server> {
        self.client
            .cached_cluster_state()
            .map(|s| s.unique_primary_nodes())
            .unwrap_or_default()
    }

    async fn load_scripts(&self) {
        for lua in [DECIDE_LUA, REFUND_LUA] {
            if let Err(e) = self.client.script_load_cluster::<(), _>(lua).await {
                tracing::warn!(error = %e, "loading scripts failed; will load on first use");
            }
        }
    }
}

/// One placement group: charges sharing a hash tag, with their distinct keys.
struct Group {
    keys: Vec<String>,
    /// Indexes into the request's charges.
    charges: Vec<usize>,
    /// Per charge, its key's index in `keys`.
    slots: Vec<usize>,
    shared: bool,
}

/// Groups charges by hash tag: descriptor groups first, shared limits last, each in order of
/// first appearance (a fixed order for every request).
fn placement_groups(charges: &[Charge<'_>]) -> Vec<Group> {
    let mut groups: Vec<(&str, Group)> = Vec::new();
    for (ci, c) in charges.iter().enumerate() {
        let tag = c.tag();
        let gi = match groups.iter().position(|(t, _)| *t == tag) {
            Some(i) => i,
            None => {
                groups.push((
                    tag,
                    Group {
                        keys: Vec::new(),
                        charges: Vec::new(),
                        slots: Vec::new(),
                        shared: tag.ends_with("|*"),
                    },
                ));
                groups.len() - 1
            }
        };
        let g = &mut groups[gi].1;
        let slot = match g.keys.iter().position(|k| *k == c.key) {
            Some(s) => s,
            None => {
                g.keys.push(c.key.clone());
                g.keys.len() - 1
            }
        };
        g.charges.push(ci);
        g.slots.push(slot);
    }
    let mut groups: Vec<Group> = groups.into_iter().map(|(_, g)| g).collect();
    groups.sort_by_key(|g| g.shared);
    groups
}

fn quota_descriptors(charges: &[Charge<'_>]) -> usize {
    let mut seen: Vec<u32> = Vec::new();
    for c in charges {
        if let Role::Quota { descriptor } = c.role {
            if !seen.contains(&descriptor) {
                seen.push(descriptor);
            }
        }
    }
    seen.len()
}

impl Store for RedisStore {
    async fn apply(
        &self,
        charges: &[Charge<'_>],
        mode: ApplyMode,
    ) -> Result<Vec<Outcome>, StoreError> {
        if let Some(outcomes) = self.deny_from_cache(charges, mode) {
            return Ok(outcomes);
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
        for (refund, now) in refunds {
            self.refund(&refund, charges, now).await;
        }
        self.remember_exhausted(charges, &outcomes);
        Ok(outcomes)
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    async fn maintain(&self) {
        let was = self.ready.load(Ordering::Relaxed);
        let primaries_before = self.primaries();
        let now = self.probe().await;
        // Topology: re-synced when a primary fails to answer (in `probe`), on MOVED (by fred),
        // and periodically here; scripts are loaded again whenever the primaries changed.
        let ticks = self.ticks.fetch_add(1, Ordering::Relaxed);
        if self.client.is_clustered() && ticks.is_multiple_of(SYNC_EVERY_TICKS) {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.client.sync_cluster()).await;
        }
        if now && (!was || self.primaries() != primaries_before) {
            self.load_scripts().await;
        }
        if now && !was {
            tracing::info!("redis reachable");
        } else if !now && was {
            tracing::warn!("redis unreachable");
        }
        self.ready.store(now, Ordering::Relaxed);
        self.cache.sweep(self.wall.now_us());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_translate() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://user:secret@127.0.0.1:6379/2",
            "redis-cluster://127.0.0.1:7000",
            "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
            "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
            "rediss://127.0.0.1:6380",
        ] {
            assert!(fred_config(url).is_ok(), "{url}");
        }
        assert!(fred_config("redis-cluster://127.0.0.1:7000,127.0.0.1:7001")
            .unwrap()
            .server
            .is_clustered());
        for bad in [
            "127.0.0.1:6379",
            "http://x:1",
            "redis-sentinel://h:1",
            "redis://",
        ] {
            assert!(fred_config(bad).is_err(), "{bad}");
        }
        let err = fred_config("bogus://user:hunter2@h:1").unwrap_err();
        assert!(!err.contains("hunter2"));
    }
}
