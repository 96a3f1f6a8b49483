//! One global limit's refill task, as every instance of a region runs it each period: flush
//! what this instance admitted and refused; take the region's lock (one holder per region,
//! `SET NX PX`); the holder feeds that demand to its [`Region`], sends the ask it makes to
//! home in the background (a request never waits on it, nor does the next period), adds each
//! grant to the regional pool and, cut off, the region's safe share; then every instance reads
//! the pool into its [`Board`](super::board::Board).
//!
//! Times given to [`Region`] are the region's Redis clock, read before each ask is sent; a
//! grant's lapse is counted from there, and its start from a moment no earlier than its
//! arrival (`docs/multi-region.md`, "Every unit is counted before it is spent").

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::board::LeaseView;
use super::error::RegionalError;
use super::inner::{settings_of, Regional, PERIOD};
use super::pool::{held, pool_ttl_ms, windows};
use crate::algorithm::global::region::Region;
use crate::algorithm::global::terms::{Ask, GlobalLimit, Grant};
use crate::base::log_throttle;
use crate::limit::regions::AcrossRegions;
use crate::limit::Limit;

/// The region's lock lives this many periods unless renewed.
const LOCK_PERIODS: u64 = 3;

/// A region's first guess at its round trip to home, before it measured one.
const RTT_GUESS_US: u64 = 50_000;

/// The keys of one global limit (one hash tag: `{g|<id>}`).
pub struct Keys {
    pub authority: String,
    pub pool: String,
    demand: String,
    lock: String,
}

/// The authority's key is named alike by every region, whatever its `--redis-key-prefix`:
/// two names in home's Redis would be two authorities, each granting the whole limit.
pub const AUTHORITY_PREFIX: &str = "tollgate:";

impl Keys {
    pub fn new(prefix: &str, id: &str) -> Keys {
        let id = id.replace('{', "%7B").replace('}', "%7D");
        let base = format!("{prefix}{{g|{id}}}");
        Keys {
            authority: format!("{AUTHORITY_PREFIX}{{g|{id}}}|authority"),
            pool: format!("{base}|pool"),
            demand: format!("{base}|demand"),
            lock: format!("{base}|lock"),
        }
    }
}

/// An ask sent to home: its task, the region's time it was sent at, and the instant before
/// that time was read.
struct InFlight {
    /// The grant, the units issued after it, and when it arrived.
    task: JoinHandle<Result<(Grant, u64, Instant), RegionalError>>,
    sent_at: u64,
    before: Instant,
    /// What the ask reported spent past the grants ([`Ask::excess`]): once home answered, the
    /// region's.
    excess: [(u64, u64); 2],
}

/// The refill task of `limit` until it is aborted (the config dropped or changed it).
pub async fn run(reg: Arc<Regional>, limit: Arc<Limit>) {
    let Some(g) = limit.global.clone() else {
        return;
    };
    let Some(index) = g.index_of(&reg.region) else {
        return;
    };
    let settings = settings_of(&limit, &g);
    let keys = Arc::new(Keys::new(&reg.key_prefix, &g.id));
    let lease = reg.board.lease(&g.id);
    let mut task = Task {
        reg,
        g,
        label: limit.metric_label.clone(),
        settings,
        index,
        keys,
        lease,
        region: None,
        in_flight: None,
        lapse_written: (0, 0),
    };
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        task.step().await;
    }
}

struct Task {
    reg: Arc<Regional>,
    g: Arc<AcrossRegions>,
    label: String,
    settings: GlobalLimit,
    index: usize,
    keys: Arc<Keys>,
    lease: Arc<LeaseView>,
    /// The region's lease and asks, while this instance holds the lock.
    region: Option<Region>,
    in_flight: Option<InFlight>,
    /// The latest lapse written for a window by [`Task::extend`].
    lapse_written: (u64, u64),
}

impl Task {
    async fn step(&mut self) {
        self.flush().await;
        let holder = self.lock().await;
        if holder {
            if let Err(e) = self.refill().await {
                self.warn("refill", &e);
            }
        } else {
            // Another instance holds the lock (or the region's Redis did not answer): what
            // this one knew is stale; it starts afresh if it takes the lock again.
            self.region = None;
            if let Some(f) = self.in_flight.take() {
                f.task.abort();
            }
        }
        if let Err(e) = self.read_pool().await {
            self.warn("pool", &e);
        }
    }

    fn warn(&self, what: &'static str, e: &dyn std::fmt::Display) {
        if let Some(suppressed) = log_throttle::due_named("global_refill", &self.g.id, 64) {
            tracing::warn!(limit = %self.g.id, suppressed, "global limit {what}: {e}");
        }
    }

    async fn call<R: FromValue>(&self, args: Vec<Value>, key: &str) -> Result<R, RegionalError> {
        self.call_keys(args, &[key]).await
    }

    async fn call_keys<R: FromValue>(
        &self,
        args: Vec<Value>,
        keys: &[&str],
    ) -> Result<R, RegionalError> {
        let options = Options {
            timeout: Some(PERIOD * 2),
            fail_fast: true,
            max_attempts: Some(1),
            ..Default::default()
        };
        let until = Instant::now() + PERIOD * 2;
        super::super::scripts::script::eval(
            &self.reg.local,
            &options,
            &self.reg.script,
            &self.reg.migrations,
            until,
            None,
            || (keys.iter().map(|&k| k.into()).collect(), args.clone()),
        )
        .await
        .map_err(|e| RegionalError::Redis(crate::store::error::StoreError::from(e).to_string()))
    }

    /// This instance's admitted and refused units, added to the region's demand.
    async fn flush(&self) {
        let a = self.lease.admitted.swap(0, Ordering::Relaxed);
        let r = self.lease.refused.swap(0, Ordering::Relaxed);
        let m = self.lease.largest.swap(0, Ordering::Relaxed);
        if a + r == 0 {
            return;
        }
        let key = self.lease.key.get().map_or("", String::as_str);
        let args = vec![
            "flush".into(),
            a.to_string().into(),
            r.to_string().into(),
            key.into(),
            m.to_string().into(),
        ];
        let keys = [self.keys.demand.as_str(), self.keys.pool.as_str()];
        if self.call_keys::<i64>(args, &keys).await.is_err() {
            // Counted next time.
            self.lease.admitted.fetch_add(a, Ordering::Relaxed);
            self.lease.refused.fetch_add(r, Ordering::Relaxed);
            self.lease.largest.fetch_max(m, Ordering::Relaxed);
        }
    }

    async fn lock(&self) -> bool {
        let ttl = (PERIOD.as_millis() as u64 * LOCK_PERIODS).to_string();
        let args = vec!["lock".into(), self.reg.me.as_str().into(), ttl.into()];
        matches!(self.call::<i64>(args, &self.keys.lock).await, Ok(1))
    }

    /// The holder's period: the demand, an answer that came, an ask to send, the safe share.
    async fn refill(&mut self) -> Result<(), RegionalError> {
        let before = Instant::now();
        let (now, spent, refused, largest): (String, String, String, String) =
            self.call(vec!["take".into()], &self.keys.demand).await?;
        let parse = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| RegionalError::State(format!("unreadable number {s}")))
        };
        let (now, spent, refused) = (parse(&now)?, parse(&spent)?, parse(&refused)?);
        let region = self
            .region
            .get_or_insert_with(|| Region::new(self.index, self.settings, RTT_GUESS_US, now));
        region.spent(spent, now);
        region.refused(refused, now);
        if let Ok(m @ 1..) = largest.parse::<u64>() {
            region.cost_seen(m, now);
        }
        self.collect(Duration::ZERO).await?;
        let region = self.region.as_mut().expect("set above");
        if let Some(mut ask) = region.tick(now) {
            // What the region's pool holds, whoever held the lock when it was granted.
            // The pool as it is now (a grant that came this period included), so that what
            // its counters hold past their grants is counted against every grant.
            self.read_pool().await?;
            ask.held = held(&self.lease.windows().0, ask.held);
            ask.excess = self.excess().await?;
            if let Some(old) = self.in_flight.take() {
                // Given up on (its answer may still land: its units stay counted, unspent).
                old.task.abort();
            }
            self.in_flight = Some(self.send(ask, now, before));
            // A near home answers within the period: its grant is spendable this period.
            self.collect(PERIOD / 2).await?;
        }
        let region = self.region.as_ref().expect("set above");
        let now_est = now + before.elapsed().as_micros() as u64;
        if let Some((window, units, from, until)) = region.safe_share_at(now_est) {
            let args = vec![
                "safe".into(),
                window.to_string().into(),
                units.to_string().into(),
                from.to_string().into(),
                until.to_string().into(),
                pool_ttl_ms(&self.settings).to_string().into(),
            ];
            let set: i64 = self.call(args, &self.keys.pool).await?;
            if set == 1 {
                self.reg.metrics.global.safe_share(&self.label, units);
            }
        }
        Ok(())
    }

    /// The answer to the ask in flight, if it comes within `wait`: into the books and the pool.
    async fn collect(&mut self, wait: Duration) -> Result<(), RegionalError> {
        let Some(f) = self.in_flight.as_mut() else {
            return Ok(());
        };
        let Ok(done) = tokio::time::timeout(wait, &mut f.task).await else {
            return Ok(());
        };
        let InFlight {
            sent_at,
            before,
            excess,
            ..
        } = self.in_flight.take().expect("in flight");
        match done {
            Ok(Ok((grant, issued, arrived))) => {
                self.owe(excess).await?;
                // The region's time at arrival, no earlier than it was.
                let arrived_at = sent_at + (arrived - before).as_micros() as u64;
                self.answered(grant, issued, sent_at, arrived_at).await
            }
            Ok(Err(e)) => {
                // Failed, not lost: the next period asks again.
                if let Some(region) = self.region.as_mut() {
                    region.ask_failed();
                }
                self.reg.metrics.global.refill(&self.label, "failed");
                self.warn("ask", &e);
                Ok(())
            }
            Err(_) => Ok(()),
        }
    }

    fn send(&self, ask: Ask, sent_at: u64, before: Instant) -> InFlight {
        let reg = self.reg.clone();
        let keys = self.keys.clone();
        let home = self.g.home.clone();
        let (settings, g) = (self.settings, self.g.clone());
        let task = tokio::spawn(async move {
            let Some(link) = reg.homes.get(&home) else {
                return Err(RegionalError::NoHome(home));
            };
            let (grant, issued) = link
                .ask(
                    &reg.script,
                    &keys.authority,
                    settings,
                    &g.regions,
                    &ask,
                    &reg.me,
                )
                .await?;
            Ok((grant, issued, Instant::now()))
        });
        InFlight {
            task,
            sent_at,
            before,
            excess: ask.excess,
        }
    }

    /// A grant came: into the region's books and the regional pool.
    async fn answered(
        &mut self,
        grant: Grant,
        issued: u64,
        sent_at: u64,
        arrived_at: u64,
    ) -> Result<(), RegionalError> {
        let now_est = arrived_at;
        // Give-backs are simulated, not served: an instance may still hold a view of the
        // pool's units from before a give-back (docs/multi-region.md).
        let kept = Grant {
            reclaim: false,
            ..grant
        };
        if let Some(region) = self.region.as_mut() {
            region.answered(&kept, sent_at, now_est);
        }
        // Only units of the current window go back (the authority counts no others).
        if grant.reclaim && grant.starts_in_us == 0 {
            self.give_back(grant.window, sent_at + grant.lifetime_us, now_est)
                .await?;
        }
        *self.lease.issued.lock() = Some((issued, Instant::now()));
        let outcome = if grant.units > 0 { "granted" } else { "empty" };
        self.reg.metrics.global.refill(&self.label, outcome);
        // As `Region::answered` counts them: the lapse from before the ask was sent, the start
        // from no earlier than the answer's arrival, each 0.1% the safe way.
        let lapses_at = sent_at + grant.lifetime_us - grant.lifetime_us / 1000;
        if grant.units == 0 {
            return self.extend(&grant, lapses_at).await;
        }
        self.reg.metrics.global.granted(&self.label, grant.units);
        let starts_at = match grant.starts_in_us {
            0 => 0,
            s => now_est + s + s / 1000,
        };
        let args = vec![
            "grant".into(),
            grant.window.to_string().into(),
            grant.units.to_string().into(),
            starts_at.to_string().into(),
            lapses_at.to_string().into(),
            pool_ttl_ms(&self.settings).to_string().into(),
        ];
        self.call::<i64>(args, &self.keys.pool).await.map(|_| ())
    }

    /// An answer of the current window without units still bounds its end, closer than the
    /// grants before it (each lapses early by 0.1% of its lifetime: 86 s of a day, 45 minutes
    /// of a month): the pool's window, if the region holds one, lapses at the latest such
    /// bound, so a long window's lease lasts to within 0.1% of the time then left.
    async fn extend(&mut self, grant: &Grant, lapses_at: u64) -> Result<(), RegionalError> {
        let (w, written) = self.lapse_written;
        let holds = self
            .lease
            .windows()
            .0
            .iter()
            .any(|p| p.index == grant.window && p.units > 0);
        if grant.starts_in_us > 0 || !holds || (w == grant.window && lapses_at < written + 100_000)
        {
            return Ok(());
        }
        self.lapse_written = (grant.window, lapses_at);
        let args = vec![
            "grant".into(),
            grant.window.to_string().into(),
            "0".into(),
            lapses_at.to_string().into(),
            lapses_at.to_string().into(),
            pool_ttl_ms(&self.settings).to_string().into(),
        ];
        self.call::<i64>(args, &self.keys.pool).await.map(|_| ())
    }

    /// The window is short: what this region holds beyond its near demand goes back, first
    /// counted as spent in its lease counter (never more than is unspent there), then removed
    /// from its books and reported in its next ask. `ends_at`: the window's lapse (region's
    /// clock).
    async fn give_back(
        &mut self,
        window: u64,
        ends_at: u64,
        now: u64,
    ) -> Result<(), RegionalError> {
        let Some(region) = self.region.as_mut() else {
            return Ok(());
        };
        let surplus = region.surplus(now);
        let Some(key) = self.lease.key.get() else {
            return Ok(());
        };
        let held = self
            .lease
            .windows()
            .0
            .iter()
            .find(|w| w.index == window)
            .map_or(0, |w| w.units);
        if surplus == 0 || held == 0 {
            return Ok(());
        }
        let counter = format!("{key}|g{window}");
        let args = vec![
            "burn".into(),
            surplus.to_string().into(),
            held.to_string().into(),
            (ends_at + 60_000_000).to_string().into(),
        ];
        let burned: i64 = self.call(args, &counter).await?;
        if burned <= 0 {
            return Ok(());
        }
        let burned = burned as u64;
        if let Some(region) = self.region.as_mut() {
            region.gave_back(window, burned, now);
        }
        self.reg.metrics.global.given_back(&self.label, burned);
        let args = vec![
            "gave".into(),
            window.to_string().into(),
            burned.to_string().into(),
        ];
        self.call::<i64>(args, &self.keys.pool).await.map(|_| ())
    }

    /// What the region's lease counters of the pool's two latest begun windows hold past what the
    /// region was granted there (its safe share included): a settle's excess, which home
    /// counts ([`Ask::excess`]).
    async fn excess(&self) -> Result<[(u64, u64); 2], RegionalError> {
        let mut out = [(0, 0); 2];
        let Some(key) = self.lease.key.get() else {
            return Ok(out);
        };
        let (windows, _) = self.lease.windows();
        let now = Instant::now();
        // The current window and the one before it (a late settle lands on its own window's
        // counter while that is kept); a next window's counter is not spent yet.
        let begun = windows.iter().rev().filter(|w| w.from <= now);
        for (slot, w) in out.iter_mut().zip(begun) {
            let counter = format!("{key}|g{}", w.index);
            let count: i64 = self.call(vec!["count".into()], &counter).await?;
            let past = (count.max(0) as u64).saturating_sub(w.units);
            *slot = (w.index, w.owed + past);
        }
        Ok(out)
    }

    /// Home counted what the region spent past its grants: recorded beside them in the pool,
    /// so the lease counters' limits cover it and the next report adds only what is new.
    async fn owe(&self, excess: [(u64, u64); 2]) -> Result<(), RegionalError> {
        let (windows, _) = self.lease.windows();
        for (w, units) in excess {
            let known = windows.iter().find(|p| p.index == w).map_or(0, |p| p.owed);
            if units > known {
                let args = vec!["owe".into(), w.to_string().into(), units.to_string().into()];
                self.call::<i64>(args, &self.keys.pool).await?;
            }
        }
        Ok(())
    }

    /// Every instance: the pool's windows, on this instance's clock.
    async fn read_pool(&self) -> Result<(), RegionalError> {
        let before = Instant::now();
        let (now, fields): (String, Vec<String>) =
            self.call(vec!["pool".into()], &self.keys.pool).await?;
        let after = Instant::now();
        let now: u64 = now
            .parse()
            .map_err(|_| RegionalError::State(format!("unreadable time {now}")))?;
        if let Some(i) = fields.iter().step_by(2).position(|f| f == "k") {
            if let Some(key) = fields.get(2 * i + 1) {
                let _ = self.lease.key.set(key.clone());
            }
        }
        self.lease.set(windows(&fields, now, before, after), before);
        Ok(())
    }
}
