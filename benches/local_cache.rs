//! The Redis store's local over-limit cache (`src/store/redis/local/local_cache.rs`) against
//! bounded concurrent cache crates holding the same value, on the operations a request makes.
//! `fifo` is the cache that module held before (a copy: 16 shards, each a mutexed `HashMap`
//! plus its keys in insertion order, SipHash), `quick_cache` and `moka` the crates used
//! directly, `tollgate` today's `LocalCache` (a `quick_cache` cache since this benchmark):
//!
//! - `miss`: a lookup of a key that is not over its limit (every request's common case), in a
//!   cache filled to capacity with other keys;
//! - `hit`: a lookup of a key known exhausted (the deny path of a hot, exhausted key);
//! - `insert_flood`: remembering distinct exhausted keys, four times the capacity of them, so
//!   nearly every insert evicts.
//!
//! A lookup is the cache's get plus the same check ours makes (the limit's parameters match,
//! the entry is not due for a re-check); an insert builds the owned key from a `&str`, as the
//! store does. Capacity 100,000 (the `--local-cache-size` default), keys shaped like counter
//! keys (44 bytes). `miss_2_threads` and `hit_2_threads` run the lookups on two threads at
//! once, one shared cache; their time is per lookup pair (both threads' lookups at once).
//!
//! `cargo bench --bench local_cache -- --warm-up-time 1 --measurement-time 3`

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use parking_lot::Mutex;
use tollgate::limit::{Algorithm, LimitParams};
use tollgate::store::redis::local::local_cache::LocalCache;

/// The `--local-cache-size` default.
const CAPACITY: usize = 100_000;
/// Keys looked up per measured batch, cycled through.
const PROBES: usize = 4_096;
const NOW: u64 = 1_000;
const RECHECK: u64 = NOW + 1_000_000;
const UNTIL: u64 = NOW + 60_000_000;

type Value = (LimitParams, u64, u64);

fn params() -> LimitParams {
    LimitParams {
        algorithm: Algorithm::FixedWindow,
        limit: 100,
        window_us: 60_000_000,
        burst: 100,
        overdraft: false,
        calendar: None,
        max_wait_us: 0,
        borrow_until: 0,
        fair_floor: 0,
        fair_cap: 0,
        ends_at_us: 0,
    }
}

/// A counter key like the planner's: `{domain|key=value}|...|suffix`, 44 bytes.
fn key(set: char, i: usize) -> String {
    format!("{{api|tenant={set}{i:07}}}|path=/v1/orders|fw_60s")
}

/// The operations the benchmark needs, as the store would make them.
trait Bounded: Sync {
    fn name(&self) -> &'static str;
    fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64>;
    fn insert(&self, key: &str, params: &LimitParams, recheck: u64, until: u64);
    /// Settles pending work (moka applies evictions lazily).
    fn settle(&self) {}
}

impl Bounded for LocalCache {
    fn name(&self) -> &'static str {
        "tollgate"
    }
    fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        LocalCache::exhausted_until(self, key, params, now)
    }
    fn insert(&self, key: &str, params: &LimitParams, recheck: u64, until: u64) {
        LocalCache::insert(self, key, params, recheck, until)
    }
}

/// The local cache as it was before quick_cache (`git log -p src/store/redis/local/local_cache.rs`).
struct Fifo {
    per_shard: usize,
    shards: Box<[Mutex<FifoShard>]>,
    hasher: RandomState,
}

#[derive(Default)]
struct FifoShard {
    entries: HashMap<String, Value>,
    order: VecDeque<String>,
}

const FIFO_SHARDS: usize = 16;

impl Fifo {
    fn new(capacity: usize) -> Fifo {
        Fifo {
            per_shard: capacity.div_ceil(FIFO_SHARDS),
            shards: (0..FIFO_SHARDS)
                .map(|_| Mutex::new(FifoShard::default()))
                .collect(),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<FifoShard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % FIFO_SHARDS]
    }
}

impl Bounded for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        let shard = self.shard(key).lock();
        match shard.entries.get(key) {
            Some((p, recheck, until)) if p == params && *recheck > now => Some(*until),
            _ => None,
        }
    }
    fn insert(&self, key: &str, params: &LimitParams, recheck: u64, until: u64) {
        let mut shard = self.shard(key).lock();
        let shard = &mut *shard;
        let value = (*params, recheck.min(until), until);
        if let Some(entry) = shard.entries.get_mut(key) {
            *entry = value;
            return;
        }
        while shard.entries.len() >= self.per_shard {
            match shard.order.pop_front() {
                Some(oldest) => {
                    shard.entries.remove(&oldest);
                }
                None => break,
            }
        }
        shard.entries.insert(key.to_string(), value);
        shard.order.push_back(key.to_string());
        if shard.order.len() > 2 * self.per_shard {
            let live = &shard.entries;
            shard.order.retain(|k| live.contains_key(k));
        }
    }
}

fn check(v: Option<Value>, params: &LimitParams, now: u64) -> Option<u64> {
    match v {
        Some((p, recheck, until)) if p == *params && recheck > now => Some(until),
        _ => None,
    }
}

impl Bounded for quick_cache::sync::Cache<String, Value> {
    fn name(&self) -> &'static str {
        "quick_cache"
    }
    fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        check(self.get(key), params, now)
    }
    fn insert(&self, key: &str, params: &LimitParams, recheck: u64, until: u64) {
        quick_cache::sync::Cache::insert(
            self,
            key.to_string(),
            (*params, recheck.min(until), until),
        )
    }
}

impl Bounded for moka::sync::Cache<String, Value> {
    fn name(&self) -> &'static str {
        "moka"
    }
    fn exhausted_until(&self, key: &str, params: &LimitParams, now: u64) -> Option<u64> {
        check(self.get(key), params, now)
    }
    fn insert(&self, key: &str, params: &LimitParams, recheck: u64, until: u64) {
        moka::sync::Cache::insert(self, key.to_string(), (*params, recheck.min(until), until))
    }
    fn settle(&self) {
        self.run_pending_tasks();
    }
}

fn caches() -> Vec<Box<dyn Bounded>> {
    vec![
        Box::new(Fifo::new(CAPACITY)),
        Box::new(LocalCache::new(CAPACITY)),
        Box::new(quick_cache::sync::Cache::<String, Value>::new(CAPACITY)),
        Box::new(moka::sync::Cache::<String, Value>::new(CAPACITY as u64)),
    ]
}

/// Fills `cache` with `held`, the last `PROBES` of them the keys `hit` looks up, and checks
/// they are all there.
fn fill(cache: &dyn Bounded, held: &[String]) {
    let p = params();
    for k in held {
        cache.insert(k, &p, RECHECK, UNTIL);
    }
    cache.settle();
    for k in &held[held.len() - PROBES..] {
        assert_eq!(
            cache.exhausted_until(k, &p, NOW),
            Some(UNTIL),
            "{}",
            cache.name()
        );
    }
}

/// `iters` lookups of `keys` on each of two threads at once; the wall time.
fn two_threads(cache: &dyn Bounded, keys: &[String], iters: u64, want: Option<u64>) -> Duration {
    let p = params();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2 {
            let p = &p;
            s.spawn(move || {
                for i in 0..iters as usize {
                    let k = &keys[(i + t * PROBES / 2) % PROBES];
                    assert_eq!(black_box(cache.exhausted_until(k, p, NOW)), want);
                }
            });
        }
    });
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    // A little less than capacity: quick_cache and moka estimate their bound.
    let held: Vec<String> = (0..CAPACITY * 9 / 10).map(|i| key('h', i)).collect();
    let hits = &held[held.len() - PROBES..];
    let misses: Vec<String> = (0..PROBES).map(|i| key('m', i)).collect();
    let flood: Vec<String> = (0..4 * CAPACITY).map(|i| key('f', i)).collect();
    let p = params();

    let mut group = c.benchmark_group("local_cache");
    group.throughput(Throughput::Elements(1));
    for cache in caches() {
        let cache = &*cache;
        let name = cache.name();
        fill(cache, &held);

        group.bench_function(format!("miss/{name}"), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % PROBES;
                assert_eq!(cache.exhausted_until(black_box(&misses[i]), &p, NOW), None);
            })
        });
        group.bench_function(format!("hit/{name}"), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % PROBES;
                assert_eq!(
                    cache.exhausted_until(black_box(&hits[i]), &p, NOW),
                    Some(UNTIL)
                );
            })
        });
        group.bench_function(format!("miss_2_threads/{name}"), |b| {
            b.iter_custom(|iters| two_threads(cache, &misses, iters, None))
        });
        group.bench_function(format!("hit_2_threads/{name}"), |b| {
            b.iter_custom(|iters| two_threads(cache, hits, iters, Some(UNTIL)))
        });
        group.bench_function(format!("insert_flood/{name}"), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % flood.len();
                cache.insert(black_box(&flood[i]), &p, RECHECK, UNTIL);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
