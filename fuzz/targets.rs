//! The fuzz targets' bodies, one function per target: `fuzz/fuzz_targets/*.rs` hands each
//! libFuzzer's input, and `tests/fuzz_corpus.rs` (a plain `cargo test`) feeds each every file
//! of its saved corpus and regressions, so a crash once fixed stays fixed without a fuzzer.
//!
//! Beyond "no panic, no hang" (libFuzzer's -timeout) and bounded memory per input
//! (-malloc_limit_mb, -rss_limit_mb in scripts/fuzz.sh), each states what its parser
//! promises: a decision never reports more remaining than its limit; a selector the admin
//! parser accepts reads back the same from the query string tollgate writes for it.

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use prost::Message;

use tollgate::admin::counters::{parse_query, query_string};
use tollgate::base::clock::ManualClock;
use tollgate::config::load::{compile_sources, LoadOptions};
use tollgate::config::xds::resource::{compile_resources, TYPE_URL};
use tollgate::config::Config;
use tollgate::limit::{Algorithm, LimitParams};
use tollgate::pb::rls::RateLimitRequest;
use tollgate::service::settings::Settings;
use tollgate::service::RateLimiter;
use tollgate::store::memory::MemoryStore;
use tollgate::store::redis::scripts::script::decode_state;
use tollgate::telemetry::stats::mapper::model::Mapper;

/// A target's body: one input.
pub type Target = fn(&[u8]);

/// Every target by name (the corpus folders' names).
pub const TARGETS: &[(&str, Target)] = &[
    ("config_file", config_file),
    ("config_dir", config_dir),
    ("xds_resource", xds_resource),
    ("stats_mapper", stats_mapper),
    ("request", request),
    ("admin_query", admin_query),
    ("ratelimit_env", ratelimit_env),
    ("decode_state", state),
    ("reservation_id", reservation_id),
];

/// Inputs are text for the text parsers: lossy, as a file read would be refused otherwise.
fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// One YAML config file (prices, classes and shares, fair shares, `max_wait`, calendars,
/// concurrency: every key of the format).
pub fn config_file(data: &[u8]) {
    let _ = compile_sources(&[("fuzz.yaml".into(), text(data))], &LoadOptions::default());
}

/// A directory of config files: the input split at each 0xFF byte, one file per part (two
/// files may name one domain, which must be refused, not merged).
pub fn config_dir(data: &[u8]) {
    let files: Vec<(String, String)> = data
        .split(|&b| b == 0xFF)
        .take(8)
        .enumerate()
        .map(|(i, part)| (format!("dir/{i}.yaml"), text(part)))
        .collect();
    let _ = compile_sources(&files, &LoadOptions::default());
}

/// An xDS `RateLimitConfig` resource as it comes off the wire.
pub fn xds_resource(data: &[u8]) {
    let any = prost_types::Any {
        type_url: TYPE_URL.to_string(),
        value: data.to_vec(),
    };
    let _ = compile_resources(&[any], &LoadOptions::default());
}

/// A statsd_exporter mapping file.
pub fn stats_mapper(data: &[u8]) {
    if let Ok(m) = Mapper::parse(&text(data), "fuzz.yaml") {
        let _ = m.map(
            "ratelimit.service.rate_limit.d.k.over_limit",
            tollgate::telemetry::stats::mapper::kind::StatKind::Counter,
        );
    }
}

/// The config the request target decides against: the shipped examples' kinds of limits.
const REQUEST_CONFIG: &str = "\
domain: fuzz
prices:
  currency: USD
  per_million_tokens:
    m: {input: 2.50, output: 10.00}
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: model
        rate_limit: {calendar: day, spend: 10}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: token_bucket}
  - key: gpu
    rate_limit: {requests_per_unit: 2, algorithm: concurrency, lease_ttl: 60s}
  - key: provider
    value: p
    hierarchical: true
    rate_limit:
      {unit: minute, requests_per_unit: 50, shared: true,
       shares: {by: priority, classes: {hi: 0.5, lo: 0.2}, default: lo}}
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
  - key: region
    value: r
    hierarchical: true
    rate_limit: {unit: minute, requests_per_unit: 30, shared: true, fair_share: {by: tenant}}
    descriptors: [{key: tenant}]
";

/// What every request input shares: the compiled config and a runtime.
struct Fixture {
    config: Arc<ArcSwap<Config>>,
    runtime: tokio::runtime::Runtime,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| Fixture {
        config: Arc::new(ArcSwap::from_pointee(
            compile_sources(
                &[("fuzz.yaml".into(), REQUEST_CONFIG.into())],
                &LoadOptions::default(),
            )
            .expect("the request target's config compiles"),
        )),
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime"),
    })
}

/// Protobuf bytes in, through validation, the plan and a fresh memory store (so memory stays
/// bounded across inputs), to a decision: decided twice, at the same time, no status ever
/// reports more remaining than its limit. Nothing is held (`max_held` 0).
pub fn request(data: &[u8]) {
    let Ok(req) = RateLimitRequest::decode(data) else {
        return;
    };
    let f = fixture();
    let settings = Settings {
        max_held: 0,
        ..Settings::default()
    };
    let clock = ManualClock::new(1_750_000_000_000_000);
    let store = Arc::new(MemoryStore::new(Arc::new(clock)));
    let limiter = RateLimiter::new(f.config.clone(), store, settings, Arc::default(), None);
    for _ in 0..2 {
        let Ok(resp) = f.runtime.block_on(limiter.should_rate_limit(&req)) else {
            return;
        };
        for s in &resp.statuses {
            if let Some(l) = &s.current_limit {
                assert!(
                    s.limit_remaining <= l.requests_per_unit,
                    "remaining {} above the limit {}: {s:?}",
                    s.limit_remaining,
                    l.requests_per_unit
                );
            }
        }
    }
}

/// The admin query (`/counters`, `/top`, a reset, the status page's form): a selector it
/// accepts reads back the same from the query string tollgate writes for it.
pub fn admin_query(data: &[u8]) {
    let q = text(data);
    if let Ok(sel) = parse_query(&q) {
        let again = parse_query(&query_string(&sel)).expect("tollgate's own query string parses");
        assert_eq!(again, sel, "query string {:?}", query_string(&sel));
    }
}

/// envoyproxy/ratelimit's environment (`KEY=value` lines) translated into tollgate's flags.
pub fn ratelimit_env(data: &[u8]) {
    let t = text(data);
    let vars: Vec<(&str, &str)> = t.lines().filter_map(|l| l.split_once('=')).collect();
    let env = |name: &str| {
        vars.iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let _ = tollgate::cli::compat::translate("ratelimit".into(), &env);
}

/// A counter's state as Redis holds it, read back for each algorithm: the first byte picks
/// the algorithm and numbers, the rest is the value.
pub fn state(data: &[u8]) {
    let Some((&pick, raw)) = data.split_first() else {
        return;
    };
    let algorithm = match pick % 4 {
        0 => Algorithm::FixedWindow,
        1 => Algorithm::SlidingWindow,
        2 => Algorithm::TokenBucket,
        _ => Algorithm::Concurrency,
    };
    let limit = [1, 3, 100, 1_000_000][(pick / 4 % 4) as usize];
    let params = LimitParams {
        algorithm,
        limit,
        window_us: 60_000_000,
        burst: limit,
        overdraft: pick & 0x80 != 0,
        calendar: None,
        max_wait_us: 0,
        borrow_until: 0,
        fair_floor: 0,
        fair_cap: 0,
        ends_at_us: 0,
    };
    let _ = decode_state(&params, raw);
}

/// A reservation's (or concurrency slot's) id as a caller sends it back: one it accepts is
/// the id tollgate writes for it.
pub fn reservation_id(data: &[u8]) {
    use tollgate::service::slots::{format_id, parse_id};
    if let Ok(id) = parse_id(&text(data)) {
        assert_eq!(parse_id(&format_id(id)).ok(), Some(id), "{:?}", text(data));
    }
}
