//! Decision cost through `RateLimiter::should_rate_limit` on the in-memory store: validate,
//! plan, lock shards, decide, respond — everything but the network.
//!
//! For each algorithm, requests of 1, 3 and 10 descriptors (one limit each) over keys spread
//! across 10,000 values, with limits high enough that every decision takes the allow path;
//! plus a deny path per algorithm (every key exhausted before measuring). Criterion reports
//! time per request and, as throughput, decisions (requests) per second.
//!
//! `cargo bench --bench decide -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tollgate::base::clock::{Clock, ManualClock, SystemClock};
use tollgate::config::load::{compile_sources, LoadOptions};
use tollgate::pb::common::rate_limit_descriptor::Entry;
use tollgate::pb::common::RateLimitDescriptor;
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::RateLimitRequest;
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::memory::MemoryStore;

const ALGORITHMS: [&str; 3] = ["fixed_window", "sliding_window", "token_bucket"];
const DESCRIPTOR_COUNTS: [usize; 3] = [1, 3, 10];
/// Distinct values per descriptor key.
const VALUES: u64 = 10_000;
/// Requests prepared up front and cycled through, so building them is not measured.
const PREPARED: usize = 8_192;

/// Keys `k0..k9`, each with one limit: `allow` never runs out within a benchmark, `deny`
/// grants one request per hour.
fn config(algorithm: &str) -> String {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for i in 0..10 {
        yaml.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: second, requests_per_unit: 1000000000, algorithm: {algorithm}}}\n"
        ));
    }
    yaml.push_str(&format!(
        "  - key: deny\n    rate_limit: {{unit: hour, requests_per_unit: 1, algorithm: {algorithm}}}\n"
    ));
    yaml
}

fn limiter(algorithm: &str, clock: Arc<dyn Clock>) -> RateLimiter<MemoryStore> {
    let config = compile_sources(
        &[("bench.yaml".into(), config(algorithm))],
        &LoadOptions::default(),
    )
    .expect("bench config compiles");
    RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(config)),
        Arc::new(MemoryStore::new(clock)),
        Settings::default(),
        Arc::default(),
        None,
    )
}

/// xorshift64: deterministic key spread without a dependency.
struct Values(u64);

impl Values {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % VALUES
    }
}

/// Requests of `n` descriptors `k0=v .. k{n-1}=v` with random values.
fn requests(n: usize, values: &mut Values) -> Vec<RateLimitRequest> {
    (0..PREPARED)
        .map(|_| RateLimitRequest {
            domain: "bench".into(),
            descriptors: (0..n)
                .map(|i| RateLimitDescriptor {
                    entries: vec![Entry {
                        key: format!("k{i}"),
                        value: values.next().to_string(),
                    }],
                    ..Default::default()
                })
                .collect(),
            hits_addend: 0,
        })
        .collect()
}

/// One-descriptor requests on the `deny` key, one per value.
fn deny_requests() -> Vec<RateLimitRequest> {
    (0..VALUES)
        .map(|v| RateLimitRequest {
            domain: "bench".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "deny".into(),
                    value: v.to_string(),
                }],
                ..Default::default()
            }],
            hits_addend: 0,
        })
        .collect()
}

/// Runs `iters` decisions inside one `block_on`, cycling through `reqs`, checking each answer.
fn run(
    rt: &tokio::runtime::Runtime,
    limiter: &RateLimiter<MemoryStore>,
    reqs: &[RateLimitRequest],
    want: Code,
    iters: u64,
) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for i in 0..iters as usize {
            let resp = limiter
                .should_rate_limit(black_box(&reqs[i % reqs.len()]))
                .await
                .expect("the memory store always answers");
            assert_eq!(resp.overall_code, want as i32, "{resp:?}");
            black_box(resp);
        }
        start.elapsed()
    })
}

fn decide(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let mut values = Values(0x9E37_79B9_7F4A_7C15);
    for algorithm in ALGORITHMS {
        let fresh = limiter(algorithm, Arc::new(SystemClock));
        let mut group = c.benchmark_group(format!("decide/{algorithm}"));
        group.throughput(Throughput::Elements(1));
        for n in DESCRIPTOR_COUNTS {
            let reqs = requests(n, &mut values);
            group.bench_with_input(BenchmarkId::from_parameter(n), &reqs, |b, reqs| {
                b.iter_custom(|iters| run(&rt, &fresh, reqs, Code::Ok, iters))
            });
        }
        // A stopped clock, so no window ends mid-measurement; every deny key is used up first.
        let exhausted = limiter(algorithm, Arc::new(ManualClock::new(SystemClock.now_us())));
        let deny = deny_requests();
        run(&rt, &exhausted, &deny, Code::Ok, deny.len() as u64);
        group.bench_with_input(BenchmarkId::from_parameter("deny_1"), &deny, |b, reqs| {
            b.iter_custom(|iters| run(&rt, &exhausted, reqs, Code::OverLimit, iters))
        });
        group.finish();
    }
}

criterion_group!(benches, decide);
criterion_main!(benches);
