//! Allocations per decision on the hot path, counted by a global allocator: what
//! `RateLimiter::should_rate_limit` on the in-memory store allocates for a request whose
//! counters exist already (steady state: every key seen before, in the same window).
//!
//! The bounds are today's counts: plan, placement, the store's locks and outcomes, the
//! decision and the response each hold a few small `Vec`s. A change that adds an allocation
//! per decision fails here and has to say why by raising the bound; one that removes some
//! lowers it. (HTTP/2 and protobuf decoding add more per call, outside this path; BENCHMARKS.md
//! counts those.)

#[path = "support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate::base::clock::SystemClock;
use tollgate::config::load::{compile_sources, LoadOptions};
use tollgate::pb::rls::rate_limit_response::Code;
use tollgate::pb::rls::RateLimitRequest;
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::memory::MemoryStore;

use support::server::req;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CONFIG: &str = "domain: bench
descriptors:
  - key: key
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
    descriptors:
      - key: model
        rate_limit: {unit: hour, requests_per_unit: 1000000000}
";

/// Allocations per decision over `reqs`, after one pass that creates every counter.
fn per_decision(reqs: &[RateLimitRequest]) -> f64 {
    let config = compile_sources(
        &[("bench.yaml".into(), CONFIG.into())],
        &LoadOptions::default(),
    )
    .expect("the config compiles");
    let limiter = RateLimiter::new(
        Arc::new(ArcSwap::from_pointee(config)),
        Arc::new(MemoryStore::new(Arc::new(SystemClock))),
        Settings::default(),
        Arc::default(),
        None,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut before = 0;
        for pass in 0..2 {
            if pass == 1 {
                before = ALLOCATIONS.load(Ordering::Relaxed);
            }
            for r in reqs {
                let resp = limiter.should_rate_limit(r).await.expect("memory answers");
                assert_eq!(resp.overall_code, Code::Ok as i32, "{resp:?}");
            }
        }
        (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / reqs.len() as f64
    })
}

#[test]
fn a_decision_allocates_no_more_than_it_did() {
    let values: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
    let one: Vec<_> = values
        .iter()
        .map(|v| req("bench", &[&[("key", v)]]))
        .collect();
    let three: Vec<_> = values
        .iter()
        .map(|v| {
            req(
                "bench",
                &[
                    &[("key", v)],
                    &[("tenant", v)],
                    &[("tenant", v), ("model", "gpt")],
                ],
            )
        })
        .collect();
    let (a, b) = (per_decision(&one), per_decision(&three));
    println!("allocations per decision: 1 descriptor {a:.2}, 3 descriptors {b:.2}");
    assert!(
        a <= 31.0,
        "1 descriptor: {a:.2} allocations per decision, at most 31"
    );
    assert!(
        b <= 47.0,
        "3 descriptors: {b:.2} allocations per decision, at most 47"
    );
}
