//! envoyproxy/ratelimit's statistics as Envoy Gateway reads them: the binary run as
//! `ratelimit` with `USE_PROMETHEUS=true` and Envoy Gateway's statsd_exporter mapping file
//! serves the exact series its Grafana dashboard and e2e tests query, with the values
//! envoyproxy/ratelimit's counting rules give for a scripted run; without a file the default
//! mapping applies; a mapping that does not parse stops startup naming its file and line.

use tollgate::pb::rls::rate_limit_service_client::RateLimitServiceClient;

use crate::support::binary::{Binary, BIN};
use crate::support::redis::RedisServer;
use crate::support::server::*;

const EG_MAPPING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/envoy-gateway/statsd_conf.yaml"
);

/// Envoy Gateway-shaped: a generic key naming the route, the match nested under it.
const CONFIG: &str = "\
domain: eg
descriptors:
  - key: route-a
    value: route-a
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: route-b
    value: route-b
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: rule-1-match-0
        value: rule-1-match-0
        rate_limit: {unit: hour, requests_per_unit: 1}
";

struct Running {
    binary: Binary,
    metrics_port: u16,
    _redis: RedisServer,
    _scratch: TempConfig,
}

async fn start(mapper: Option<&str>) -> Running {
    let redis = tokio::task::block_in_place(RedisServer::start);
    let scratch = TempConfig::new("");
    let config_dir = scratch.dir.join("data/ratelimit/config");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    std::fs::write(config_dir.join("config.yaml"), CONFIG).expect("config");
    let (http_port, grpc_port, metrics_port) = (free_port(), free_port(), free_port());
    let mut env = vec![
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        (
            "RUNTIME_ROOT",
            scratch.dir.join("data").display().to_string(),
        ),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("PORT", http_port.to_string()),
        ("GRPC_PORT", grpc_port.to_string()),
        ("DEBUG_PORT", free_port().to_string()),
        ("USE_STATSD", "false".into()),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", format!(":{metrics_port}")),
    ];
    if let Some(m) = mapper {
        env.push(("PROMETHEUS_MAPPER_YAML", m.to_string()));
    }
    let env = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let mut binary = Binary::as_ratelimit(&scratch.dir, env, grpc_port, http_port).await;
    binary.wait_ready().await;
    Running {
        binary,
        metrics_port,
        _redis: redis,
        _scratch: scratch,
    }
}

/// The scripted decisions, with the statuses they must get.
async fn script(r: &Running) {
    let addr = format!("127.0.0.1:{}", r.binary.grpc_port())
        .parse()
        .expect("addr");
    let mut client = RateLimitServiceClient::new(channel(addr).await);
    let a = |hits: u32| {
        let mut q = req("eg", &[&[("route-a", "route-a")]]);
        q.hits_addend = hits;
        q
    };
    // route-a, 5 an hour (near limit above 4): 1, 2, 3 within; 3 more would make 6 (denied,
    // charges nothing: 1 over, 1 near); 4 within; 5 within and near; 6 over.
    for (hits, want) in [
        (1, OK),
        (1, OK),
        (1, OK),
        (3, OVER_LIMIT),
        (1, OK),
        (1, OK),
        (1, OVER_LIMIT),
    ] {
        let got = call(&mut client, a(hits)).await;
        assert_eq!(got.overall_code, want, "route-a hits {hits}: {got:?}");
    }
    // route-b / rule-0-match-0, 2 an hour in shadow mode: the third is over but OK.
    for _ in 0..3 {
        let got = call(
            &mut client,
            req(
                "eg",
                &[&[("route-b", "route-b"), ("rule-0-match-0", "rule-0-match-0")]],
            ),
        )
        .await;
        assert_eq!(got.overall_code, OK, "{got:?}");
    }
    // route-b / rule-1-match-0, 1 an hour: every hit is near the limit.
    for want in [OK, OVER_LIMIT] {
        let got = call(
            &mut client,
            req(
                "eg",
                &[&[("route-b", "route-b"), ("rule-1-match-0", "rule-1-match-0")]],
            ),
        )
        .await;
        assert_eq!(got.overall_code, want, "{got:?}");
    }
    // An invalid request: a service error.
    assert!(try_call(&mut client, req("", &[&[("k", "v")]]))
        .await
        .is_err());
}

async fn scrape(r: &Running, path: &str) -> String {
    let response = http_client()
        .get(format!("http://127.0.0.1:{}{path}", r.metrics_port))
        .send()
        .await
        .expect("GET metrics");
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        response.headers()
    );
    response.text().await.expect("body")
}

fn assert_series(text: &str, want: &[&str]) {
    for line in want {
        assert!(
            text.lines().any(|l| l == *line),
            "missing `{line}` in:\n{text}"
        );
    }
}

const RULE_SERIES: &[&str] = &[
    "# TYPE ratelimit_service_rate_limit_total_hits counter",
    "ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"route-a_route-a\"} 9",
    "ratelimit_service_rate_limit_within_limit{domain=\"eg\",key1=\"route-a_route-a\"} 5",
    "ratelimit_service_rate_limit_near_limit{domain=\"eg\",key1=\"route-a_route-a\"} 2",
    "ratelimit_service_rate_limit_over_limit{domain=\"eg\",key1=\"route-a_route-a\"} 2",
    "ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-0-match-0_rule-0-match-0\"} 3",
    "ratelimit_service_rate_limit_within_limit{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-0-match-0_rule-0-match-0\"} 2",
    "ratelimit_service_rate_limit_near_limit{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-0-match-0_rule-0-match-0\"} 1",
    "ratelimit_service_rate_limit_over_limit{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-0-match-0_rule-0-match-0\"} 1",
    "ratelimit_service_rate_limit_shadow_mode{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-0-match-0_rule-0-match-0\"} 1",
    "ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-1-match-0_rule-1-match-0\"} 2",
    "ratelimit_service_rate_limit_near_limit{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-1-match-0_rule-1-match-0\"} 1",
    "ratelimit_service_rate_limit_within_limit{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-1-match-0_rule-1-match-0\"} 1",
    "ratelimit_service_rate_limit_over_limit{domain=\"eg\",key1=\"route-b_route-b\",key2=\"rule-1-match-0_rule-1-match-0\"} 1",
    "# TYPE ratelimit_service_should_rate_limit_error counter",
    "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 1",
    "ratelimit_service_config_load_success 1",
    "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 13",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_mapping_gives_its_dashboards_series() {
    let r = start(Some(EG_MAPPING)).await;
    script(&r).await;
    let text = scrape(&r, "/metrics").await;
    assert_series(&text, RULE_SERIES);
    assert_series(
        &text,
        &[
            "# HELP ratelimit_service_rate_limit_over_limit Metric autogenerated by statsd_exporter.",
            "# TYPE ratelimit_service_response_time_seconds histogram",
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 13",
        ],
    );
    // Nothing counted, nothing shown; tollgate's own series beside them.
    assert!(!text.contains("over_limit_with_local_cache"), "{text}");
    assert!(text.contains("\ntollgate_requests_total{"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_mapping_file_the_default_mapping_applies() {
    let r = start(Some("/nonexistent/statsd-exporter/conf.yaml")).await;
    script(&r).await;
    let text = scrape(&r, "/metrics").await;
    assert_series(&text, RULE_SERIES);
    // The default mapping scales milliseconds to seconds.
    assert_series(
        &text,
        &["# TYPE ratelimit_service_response_time_seconds histogram"],
    );
    let log = r.binary.log();
    assert_eq!(log.matches("PROMETHEUS_MAPPER_YAML").count(), 1, "{log}");
}

#[test]
fn a_mapping_that_does_not_parse_stops_startup_with_file_and_line() {
    let scratch = TempConfig::new(CONFIG);
    let bad = scratch.dir.join("bad-mapper.yaml");
    std::fs::write(&bad, "mappings:\n  - match: \"a.*\"\n    name: [unclosed\n").expect("write");
    let out = std::process::Command::new(BIN)
        .env_clear()
        .args(["serve", "--config"])
        .arg(&scratch.path)
        .arg("--prometheus-mapper")
        .arg(&bad)
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let at = format!("{}:", bad.display());
    let line = stderr
        .split(&at)
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default();
    assert!(line.parse::<usize>().is_ok(), "no file:line in {stderr}");
}
