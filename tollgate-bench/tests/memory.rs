//! Memory does not grow with `--keys`: requests are built when they are sent.
//!
//! This test binary counts every heap allocation of the process (its own global allocator),
//! so its tests take turns through [`SERIAL`] rather than run side by side.

mod fake_rls;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use fake_rls::Answered;
use tollgate_bench::keys::KeyChoice;
use tollgate_bench::template::{DescriptorTemplate, RequestTemplate};
use tollgate_bench::{run, BenchArgs};

/// The system allocator, counting.
struct Counting;

thread_local! {
    /// Allocations this thread made so far (per thread, so the test harness's own threads
    /// do not count).
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_allocation() {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}
/// Bytes allocated and not yet freed.
static LIVE: AtomicU64 = AtomicU64::new(0);
/// The most `LIVE` has been since the last [`reset_peak`].
static PEAK: AtomicU64 = AtomicU64::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes as u64, Ordering::SeqCst) + bytes as u64;
    PEAK.fetch_max(live, Ordering::SeqCst);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes as u64, Ordering::SeqCst);
}

// SAFETY: every call is passed on to `System` unchanged; the counting only reads sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count_allocation();
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            count_allocation();
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Tests here measure the whole process, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Allocations `f` makes on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (out, ALLOCATIONS.with(Cell::get) - before)
}

fn template() -> Vec<DescriptorTemplate> {
    vec![DescriptorTemplate::parse("k={key},model=gpt").unwrap()]
}

#[test]
fn setting_up_four_billion_keys_costs_what_one_key_costs() {
    let _turn = one_at_a_time();
    let setup = |keys: u32| {
        allocations(|| {
            (
                RequestTemplate::new("edge", template(), 0, keys).unwrap(),
                KeyChoice::new(keys, None),
            )
        })
    };
    let (_, one_key) = setup(1);
    let (_, four_billion_keys) = setup(4_000_000_000);
    assert_eq!(four_billion_keys, one_key);
}

#[test]
fn each_request_is_a_few_allocations_whatever_its_key() {
    let _turn = one_at_a_time();
    let requests = RequestTemplate::new("edge", template(), 0, u32::MAX).unwrap();
    for key in [0, 7, 1_000_000, 3_999_999_999, u32::MAX] {
        let (request, n) = allocations(|| requests.request(key));
        // The domain, the descriptor list, one entry list, two strings per entry.
        assert_eq!(n, 7, "key {key}");
        assert_eq!(request.descriptors[0].entries[0].value, key.to_string());
    }
}

#[test]
fn a_run_over_four_billion_keys_stays_small() {
    let _turn = one_at_a_time();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (addr, answered) = fake_rls::start(Duration::ZERO).await;
        let args = BenchArgs {
            addr,
            domain: "edge".into(),
            descriptors: vec!["k={key},model=gpt".into()],
            keys: 4_000_000_000,
            hot_share: None,
            hits: None,
            concurrency: 8,
            connections: 2,
            duration: Duration::from_millis(300),
            warmup: Duration::ZERO,
            rate: None,
            timeout: Duration::from_secs(10),
            grpc_timeout: None,
            threads: 0,
            json: true,
        };
        let live = LIVE.load(Ordering::SeqCst);
        PEAK.store(live, Ordering::SeqCst);
        let out = run(&args).await.unwrap();
        let grown = PEAK.load(Ordering::SeqCst) - live;
        // A table of four billion requests would need hundreds of gigabytes.
        assert!(grown < 16 << 20, "the run's heap grew by {grown} bytes");

        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(j["keys"], 4_000_000_000u64, "{j}");
        assert!(j["requests"].as_u64().unwrap() > 0, "{j}");
        assert_eq!(j["requests"].as_u64(), Some(answered.total()), "{j}");
        // Keys come from the whole range, not from a small prefix of it.
        assert!(Answered::get(&answered.max_key) >= 1_000_000, "{j}");
    });
}
