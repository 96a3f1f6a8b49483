//! Concurrency slots through a real Envoy: a generation takes a slot of `model_in_flight` when
//! it is admitted, and Envoy's ratelimit filter gives it back when the stream is done
//! (`apply_on_stream_done: true`, `tollgate.release` read from the filter's dynamic metadata,
//! where tollgate's answer put the slot id); see [`super::fixture::slot_limits`]. Generations
//! are the backend's held streams (`x-hold`), ended by the test.
//!
//! What Envoy 1.40 does, as these tests see it on every store:
//! - the stream-done call is made when the filter is destroyed, after the response ended, so
//!   the release reaches tollgate after the client has its last byte (the tests wait for
//!   tollgate's release counter);
//! - a client that disconnects mid-stream gets the same call (the filter is destroyed on a reset
//!   too): its slot is freed at once, not at the end of its lease;
//! - a refused request got no id, so the `metadata` action finds nothing and, with no
//!   `default_value`, Envoy drops the descriptor and makes no stream-done call at all;
//! - a slot no call releases frees itself when its lease ends.
//!
//! The tests run one at a time ([`serial`]): each counts the fixture tollgates' releases.

use std::time::Duration;

use prometheus_parse::{Scrape, Value};
use tokio::time::Instant;

use super::enforce::get;
use super::fixture::{fixture, unique, Side};
use crate::support::binary::Binary;
use crate::support::envoy::Backend;
use crate::support::server::http_client;

/// How long a test waits for Envoy's stream-done call to reach tollgate.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// A tollgate's counters: releases of ids that held slots, of ids that held none
/// (`tollgate_slot_operations_total{op="release"}`), and `ShouldRateLimit` calls in `domain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub held: u64,
    pub not_held: u64,
    pub calls: u64,
}

/// The sum of `metric`'s counters whose labels include `labels`.
pub fn sum(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> u64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Untyped(v) => v as u64,
            _ => 0,
        })
        .sum()
}

pub async fn counts(tollgate: &Binary, domain: &str) -> Counts {
    let text = http_client()
        .get(format!("{}/metrics", tollgate.http_url))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text");
    let sum = |metric: &str, labels: &[(&str, &str)]| sum(&scrape, metric, labels);
    let releases = "tollgate_slot_operations_total";
    Counts {
        held: sum(releases, &[("op", "release"), ("held", "true")]),
        not_held: sum(releases, &[("op", "release"), ("held", "false")]),
        calls: sum("tollgate_requests_total", &[("domain", domain)]),
    }
}

/// Waits until `tollgate` has counted `want` (Envoy's stream-done call comes after the client
/// got its response); fails on any other count or after [`RELEASE_WAIT`].
pub async fn wait_counts(name: &str, tollgate: &Binary, domain: &str, want: Counts) {
    let deadline = Instant::now() + RELEASE_WAIT;
    loop {
        let seen = counts(tollgate, domain).await;
        if seen == want {
            return;
        }
        let below = seen.held <= want.held && seen.not_held <= want.not_held;
        assert!(
            below && seen.calls <= want.calls && Instant::now() < deadline,
            "[{name}] {domain}: {seen:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A streaming generation through Envoy: admitted (its headers and first chunk are here) and
/// held by the backend until [`Generation::finish`].
pub struct Generation {
    hold: String,
    resp: reqwest::Response,
}

/// Starts a generation of `model` at `url`: `Ok` once it streams, `Err(status)` when Envoy
/// refused it (then it never reached the backend). Each has a client (a connection) of its own.
pub async fn generation(url: &str, model: &str) -> Result<Generation, u16> {
    generation_with(url, &[("x-model", model)]).await
}

/// [`generation`] with request headers `headers`.
pub async fn generation_with(url: &str, headers: &[(&str, &str)]) -> Result<Generation, u16> {
    let (hold, id) = (unique("hold"), unique("generation"));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let mut send = client
        .get(url)
        .header("x-hold", &hold)
        .header("x-test-id", &id);
    for (k, v) in headers {
        send = send.header(*k, *v);
    }
    let send = send.send();
    let mut resp = tokio::time::timeout(Duration::from_secs(5), send)
        .await
        .expect("Envoy answers in time")
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    if status != 200 {
        assert!(
            !Backend::get().saw(&id),
            "a refused generation reached the model"
        );
        return Err(status);
    }
    let first = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .expect("the first chunk in time")
        .expect("the first chunk");
    assert_eq!(first.as_deref(), Some(&b"start\n"[..]));
    Ok(Generation { hold, resp })
}

impl Generation {
    /// The backend ends the stream; the client reads it to its end.
    pub async fn finish(mut self) {
        Backend::get().finish(&self.hold);
        let mut rest = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(5), self.resp.chunk())
            .await
            .expect("the stream ends in time")
            .expect("the rest of the stream")
        {
            rest.extend_from_slice(&chunk);
        }
        assert_eq!(rest, b"end\n");
    }

    /// The client goes away mid-stream: the response and its connection dropped.
    pub fn disconnect(self) {
        // The held response is never finished: Envoy resets its upstream stream.
        drop(self.resp);
    }
}

/// Two of `model`'s generations hold both slots, so a third is refused: the generations.
async fn fill(side: &Side, path: &str, model: &str) -> [Generation; 2] {
    let name = side.name();
    let a = generation(&side.url(path), model).await;
    let b = generation(&side.url(path), model).await;
    let (Ok(a), Ok(b)) = (a, b) else {
        panic!("[{name}] {path}: two generations in flight are within the cap");
    };
    assert_eq!(
        generation(&side.url(path), model).await.err(),
        Some(429),
        "[{name}] {path}: a third while two are in flight"
    );
    [a, b]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_generation_gives_its_slot_back_through_envoy() {
    let fx = fixture().await;
    let _serial = serial().await;
    // The filter's per-route list (the shipped form) and the route's own rate_limits: Envoy
    // makes the stream-done call from either.
    let domain = "llm-slots";
    for path in ["/slots/held", "/slots/route"] {
        for side in &fx.sides {
            let name = side.name();
            let model = unique("model");
            let start = counts(&side.tollgate, domain).await;
            let [a, b] = fill(side, path, &model).await;
            // Three checks, nothing released yet (the refused one sent no release).
            let mut want = Counts {
                calls: start.calls + 3,
                ..start
            };
            wait_counts(side.name(), &side.tollgate, domain, want).await;

            a.finish().await;
            want.held += 1;
            want.calls += 1;
            wait_counts(side.name(), &side.tollgate, domain, want).await;
            let c = generation(&side.url(path), &model).await;
            let c = c.unwrap_or_else(|s| panic!("[{name}] {path}: the freed slot, got {s}"));
            assert_eq!(
                generation(&side.url(path), &model).await.err(),
                Some(429),
                "[{name}] {path}: both slots held again"
            );
            want.calls += 2;

            b.finish().await;
            c.finish().await;
            want.held += 2;
            want.calls += 2;
            wait_counts(side.name(), &side.tollgate, domain, want).await;
            // Both slots free: two more fit at once.
            let [d, e] = fill(side, path, &model).await;
            d.finish().await;
            e.finish().await;
            want.held += 2;
            want.calls += 5;
            wait_counts(side.name(), &side.tollgate, domain, want).await;
            assert_eq!(want.not_held, start.not_held, "[{name}] every release held");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_gives_its_slot_back() {
    let fx = fixture().await;
    let _serial = serial().await;
    let (path, domain) = ("/slots/held", "llm-slots");
    for side in &fx.sides {
        let name = side.name();
        let model = unique("model");
        let start = counts(&side.tollgate, domain).await;
        let [a, b] = fill(side, path, &model).await;
        // Envoy resets the stream when the client goes; its filter is destroyed all the same
        // and makes the stream-done call: the release comes at once (the lease is 5 minutes).
        a.disconnect();
        let mut want = Counts {
            held: start.held + 1,
            calls: start.calls + 4,
            ..start
        };
        wait_counts(side.name(), &side.tollgate, domain, want).await;
        let c = generation(&side.url(path), &model).await;
        let c = c.unwrap_or_else(|s| panic!("[{name}] the disconnected one's slot, got {s}"));
        b.disconnect();
        c.disconnect();
        want.held += 2;
        want.calls += 3;
        wait_counts(side.name(), &side.tollgate, domain, want).await;
        let [d, e] = fill(side, path, &model).await;
        d.finish().await;
        e.finish().await;
        want.held += 2;
        want.calls += 5;
        wait_counts(side.name(), &side.tollgate, domain, want).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_never_released_frees_itself_when_its_lease_ends() {
    let fx = fixture().await;
    let _serial = serial().await;
    // `/slots/unreleased` has no stream-done entry: its slot (1 per model, lease 1 s) is only
    // freed by its lease.
    let (path, domain) = ("/slots/unreleased", "llm-slots");
    let lease = Duration::from_secs(1);
    for side in &fx.sides {
        let name = side.name();
        let model = unique("model");
        let start = counts(&side.tollgate, domain).await;
        let sent = Instant::now();
        let a = generation(&side.url(path), &model).await;
        let a = a.unwrap_or_else(|s| panic!("[{name}] the first, got {s}"));
        a.finish().await;
        // The generation is over, but nothing gives its slot back.
        let (status, _) = get(&side.url(path), &[("x-model", &model)]).await;
        assert_eq!(status, 429, "[{name}] the slot is still held");
        let deadline = sent + lease + Duration::from_secs(4);
        let mut calls = 2;
        let freed = loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (status, _) = get(&side.url(path), &[("x-model", &model)]).await;
            calls += 1;
            if status == 200 {
                break Instant::now();
            }
            assert_eq!(status, 429, "[{name}]");
            assert!(Instant::now() < deadline, "[{name}] the lease never ended");
        };
        assert!(
            freed >= sent + lease,
            "[{name}] freed after {:?}, before its lease of {lease:?}",
            freed - sent
        );
        let want = Counts {
            calls: start.calls + calls,
            ..start
        };
        wait_counts(side.name(), &side.tollgate, domain, want).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            counts(&side.tollgate, domain).await,
            want,
            "[{name}] no release call"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_sends_no_release() {
    let fx = fixture().await;
    let _serial = serial().await;
    let (path, domain) = ("/slots/held", "llm-slots");
    for side in &fx.sides {
        let name = side.name();
        let model = unique("model");
        let [a, b] = fill(side, path, &model).await;
        let before = counts(&side.tollgate, domain).await;
        for _ in 0..3 {
            let (status, _) = get(&side.url(path), &[("x-model", &model)]).await;
            assert_eq!(status, 429, "[{name}]");
        }
        // Three checks and nothing else: no stream-done call (no id, so the metadata action
        // drops the descriptor and Envoy has nothing to send), no release of any kind.
        let want = Counts {
            calls: before.calls + 3,
            ..before
        };
        wait_counts(side.name(), &side.tollgate, domain, want).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(counts(&side.tollgate, domain).await, want, "[{name}]");
        assert_eq!(
            want.not_held, 0,
            "[{name}] no release of an id that held nothing"
        );
        a.finish().await;
        b.finish().await;
        wait_counts(
            side.name(),
            &side.tollgate,
            domain,
            Counts {
                held: want.held + 2,
                calls: want.calls + 2,
                ..want
            },
        )
        .await;
    }
}
