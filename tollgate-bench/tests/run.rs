//! End to end: [`tollgate_bench::run`] against a fake server on a loopback socket.
//!
//! The machine may be loaded (CI shares two cores), so these tests compare the report with
//! what the server counted and with the schedule's arithmetic, never with the wall clock.

mod fake_rls;

use std::time::Duration;

use fake_rls::Answered;
use tollgate_bench::{run, BenchArgs};

/// A short closed-loop run over keys 0..10; tests change what they need.
fn args(addr: String) -> BenchArgs {
    BenchArgs {
        addr,
        domain: "edge".into(),
        descriptors: vec!["k={key},model=gpt".into()],
        keys: 10,
        hot_share: None,
        hits: None,
        concurrency: 8,
        connections: 2,
        duration: Duration::from_millis(300),
        warmup: Duration::ZERO,
        rate: None,
        // Long enough that no answer the server sends is lost to a client timeout.
        timeout: Duration::from_secs(10),
        grpc_timeout: None,
        threads: 0,
        json: true,
    }
}

async fn run_json(args: &BenchArgs) -> serde_json::Value {
    serde_json::from_str(&run(args).await.unwrap()).unwrap()
}

fn count(j: &serde_json::Value, key: &str) -> u64 {
    j[key].as_u64().unwrap_or_else(|| panic!("{key} in {j}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_counts_every_answer() {
    let (addr, answered) = fake_rls::start(Duration::ZERO).await;
    let j = run_json(&args(addr)).await;
    assert_eq!(j["mode"], "closed");
    // Without warmup every call is measured, so the report and the server agree exactly.
    assert_eq!(count(&j, "ok"), Answered::get(&answered.ok), "{j}");
    assert_eq!(
        count(&j, "over_limit"),
        Answered::get(&answered.over_limit),
        "{j}"
    );
    let exhausted = Answered::get(&answered.exhausted);
    assert_eq!(
        count(&j["errors_by_code"], "RESOURCE_EXHAUSTED"),
        exhausted,
        "{j}"
    );
    assert_eq!(count(&j, "errors"), exhausted, "{j}");
    assert_eq!(count(&j, "requests"), answered.total(), "{j}");
    assert!(count(&j, "requests") > 0, "{j}");
    assert!(Answered::get(&answered.max_key) < 10, "keys stay in 0..10");
    assert!(j["duration_s"].as_f64().unwrap() >= 0.3, "{j}");
    assert!(count(&j, "p50_us") <= count(&j, "p99_us"));
    assert!(count(&j, "p99_us") <= count(&j, "max_us"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_keeps_the_schedule_and_leaves_warmup_out() {
    let (addr, answered) = fake_rls::start(Duration::ZERO).await;
    let mut a = args(addr);
    a.rate = Some(500.0);
    a.warmup = Duration::from_millis(100);
    a.duration = Duration::from_millis(400);
    let j = run_json(&a).await;
    assert_eq!(j["mode"], "open");
    assert_eq!(j["target_rate"], 500.0);
    // 500/s: 50 requests due in the warmup, exactly 200 in the measured 0.4 s.
    assert_eq!(count(&j, "requests"), 200, "{j}");
    assert_eq!(count(&j, "unsent"), 0, "{j}");
    assert_eq!(answered.total(), 250, "{j}");
    let total = count(&j, "ok") + count(&j, "over_limit") + count(&j, "errors");
    assert_eq!(total, 200, "{j}");
    // Sent before the end, per second: never more than the rate.
    let sent = j["sent_per_sec"].as_f64().unwrap();
    assert!(sent > 0.0 && sent <= 500.0, "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_charges_a_slow_server_from_the_due_time() {
    // One in flight, 50 ms each: about 20/s against 1000/s due.
    let mut a = args(fake_rls::start(Duration::from_millis(50)).await.0);
    a.rate = Some(1000.0);
    a.concurrency = 1;
    a.duration = Duration::from_millis(200);
    a.timeout = Duration::from_millis(500);
    let j = run_json(&a).await;
    // Every due request is counted: sent, or unsent.
    assert_eq!(count(&j, "requests"), 200, "{j}");
    let (late, unsent) = (count(&j, "late"), count(&j, "unsent"));
    // At most (0.2 s + 0.5 s) / 50 ms + 1 = 15 can be sent.
    assert!(late > 0 && unsent >= 185, "{j}");
    assert_eq!(count(&j["errors_by_code"], "UNSENT"), unsent, "{j}");
    // The third request sent waited behind two 50 ms calls: far more than its own 50 ms.
    assert!(count(&j, "max_us") > 100_000, "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_counted_as_errors() {
    let mut a = args(fake_rls::start(Duration::from_millis(300)).await.0);
    a.timeout = Duration::from_millis(50);
    a.duration = Duration::from_millis(200);
    let j = run_json(&a).await;
    assert_eq!(count(&j, "ok") + count(&j, "over_limit"), 0, "{j}");
    assert!(count(&j, "requests") > 0, "{j}");
    assert_eq!(
        count(&j["errors_by_code"], "TIMEOUT"),
        count(&j, "requests"),
        "{j}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_naming_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let e = run(&args(addr.clone())).await.unwrap_err();
    assert!(format!("{e:#}").contains(&addr), "{e:#}");
}

#[tokio::test(flavor = "current_thread")]
async fn closed_loop_on_one_thread_counts_every_answer() {
    // `--threads 1` runs everything, connections included, on one current-thread runtime.
    let (addr, answered) = fake_rls::start(Duration::ZERO).await;
    let j = run_json(&args(addr)).await;
    assert!(count(&j, "requests") > 0, "{j}");
    assert_eq!(count(&j, "requests"), answered.total(), "{j}");
    assert_eq!(count(&j, "ok"), Answered::get(&answered.ok), "{j}");
}

#[tokio::test]
async fn a_server_that_does_not_speak_http2_fails_every_call_as_unavailable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        }
    });
    let j = run_json(&args(addr)).await;
    assert!(count(&j, "requests") > 0, "{j}");
    assert_eq!(count(&j, "ok") + count(&j, "over_limit"), 0, "{j}");
    assert_eq!(
        count(&j["errors_by_code"], "UNAVAILABLE"),
        count(&j, "requests"),
        "{j}"
    );
}

#[tokio::test]
async fn an_address_that_is_not_plain_http_is_refused() {
    let e = run(&args("https://127.0.0.1:1".into())).await.unwrap_err();
    assert!(format!("{e:#}").contains("only http://"), "{e:#}");
}
