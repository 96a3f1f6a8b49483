//! `/metrics` from outside: parsed by a Prometheus text parser, the counters move exactly as a
//! scripted sequence of answers predicts; label sets stay bounded whatever values callers
//! send; and every metric the shipped Grafana dashboard and alert rules query exists.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_parse::{Scrape, Value};
use tollgate::service::settings::Settings;

use crate::support::server::*;

const CONFIG: &str = "\
domain: m
descriptors:
  - key: a
    rate_limit: {name: a-limit, unit: minute, requests_per_unit: 2}
  - key: s
    shadow_mode: true
    rate_limit: {name: s-limit, unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: v
    rate_limit: {name: per-value, unit: minute, requests_per_unit: 10}
";

async fn scrape(server: &TestServer) -> Scrape {
    scrape_url(&server.http_url("/metrics")).await
}

/// `GET url` parsed as Prometheus text.
pub(crate) async fn scrape_url(url: &str) -> Scrape {
    let text = http_client()
        .get(url)
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("body");
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text")
}

/// The value of the sample `name` whose labels include every `(label, value)` given.
pub(crate) fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(_) | Value::Summary(_) => f64::NAN,
        })
        .sum()
}

#[tokio::test]
async fn counters_follow_the_answers_per_domain_and_limit() {
    let server = start(CONFIG, Settings::default()).await;
    let mut client = server.client().await;
    for _ in 0..3 {
        call(&mut client, req("m", &[&[("a", "x")]])).await;
    }
    for _ in 0..2 {
        call(&mut client, req("m", &[&[("s", "x")]])).await;
    }
    call(&mut client, req("m", &[&[("b", "x")]])).await;
    call(&mut client, req("nowhere", &[&[("a", "x")]])).await;
    call_invalid(&mut client, request("m", vec![])).await;

    let m = scrape(&server).await;
    let requests = |domain, code| {
        value(
            &m,
            "tollgate_requests_total",
            &[("domain", domain), ("code", code)],
        )
    };
    assert_eq!(requests("m", "OK"), 5.0);
    assert_eq!(requests("m", "OVER_LIMIT"), 1.0);
    assert_eq!(requests("m", "INVALID"), 1.0);
    assert_eq!(requests("__unknown__", "OK"), 1.0);
    let decisions = |limit, result| {
        value(
            &m,
            "tollgate_limit_decisions_total",
            &[("domain", "m"), ("limit", limit), ("result", result)],
        )
    };
    // a-limit (2/min): 1 used is within 80%, 2 used is near, the third is over.
    assert_eq!(decisions("a-limit", "within_limit"), 1.0);
    assert_eq!(decisions("a-limit", "near_limit"), 1.0);
    assert_eq!(decisions("a-limit", "over_limit"), 1.0);
    // s-limit (1/min, shadow): the second would be over.
    assert_eq!(decisions("s-limit", "near_limit"), 1.0);
    assert_eq!(decisions("s-limit", "shadow"), 1.0);
    // An unnamed limit is labelled with its rule's path.
    assert_eq!(decisions("m.b", "within_limit"), 1.0);
    assert_eq!(
        value(
            &m,
            "tollgate_limit_hits_total",
            &[("limit", "a-limit"), ("result", "over_limit")]
        ),
        1.0
    );
    assert_eq!(value(&m, "tollgate_ready", &[]), 1.0);
    assert_eq!(value(&m, "tollgate_store_up", &[]), 1.0);
    assert_eq!(
        value(
            &m,
            "tollgate_config_reloads_total",
            &[("result", "success")]
        ),
        1.0
    );
    server.stop().await;
}

#[tokio::test]
async fn label_sets_stay_bounded_whatever_values_callers_send() {
    let server = start(CONFIG, Settings::default()).await;
    let mut client = server.client().await;
    let names = |s: &Scrape| {
        s.samples
            .iter()
            .map(|x| {
                let labels: BTreeMap<_, _> = x.labels.iter().collect();
                format!("{}{labels:?}", x.metric)
            })
            .collect::<BTreeSet<_>>()
    };
    let mut send = async |range: std::ops::Range<usize>| {
        for i in range {
            let value = format!("caller-chosen-{i}");
            let domain = if i % 2 == 0 { "m" } else { "made-up" };
            call(&mut client, req(domain, &[&[("v", &value)]])).await;
        }
    };
    // Every series these requests can reach exists after the first hundred.
    send(0..100).await;
    let before = names(&scrape(&server).await);
    send(100..10_000).await;
    let after = scrape(&server).await;
    // 9,900 more caller-chosen values add no series at all.
    let new_series: Vec<_> = names(&after).difference(&before).cloned().collect();
    assert!(new_series.is_empty(), "{new_series:#?}");
    assert!(!after
        .samples
        .iter()
        .any(|s| s.labels.values().any(|v| v.contains("caller-chosen"))));
    server.stop().await;
}

/// Every `tollgate_*` metric the Grafana dashboards or the alert rules name. (The
/// `ratelimit_service_*` series of envoyproxy-ratelimit-dashboard.json are not tollgate_*.)
fn shipped_metric_names() -> BTreeSet<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut names = BTreeSet::new();
    for file in [
        "deploy/grafana/tollgate-dashboard.json",
        "deploy/grafana/envoyproxy-ratelimit-dashboard.json",
        "deploy/prometheus/tollgate-alerts.yaml",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).expect(file);
        for (i, _) in text.match_indices("tollgate_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name)
                .to_string();
            names.insert(base);
        }
    }
    // Alert names (TollgateStoreDown) are not metrics; `tollgate_` prefixes only are.
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_query_exists() {
    let server = start(CONFIG, Settings::default()).await;
    let mut client = server.client().await;
    call(&mut client, req("m", &[&[("a", "x")]])).await;
    let text = http_client()
        .get(server.http_url("/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("body");
    let exported: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .flat_map(|family| [family.to_string(), format!("{family}_total")])
        .collect();
    let wanted = shipped_metric_names();
    assert!(wanted.len() >= 10, "found only {wanted:?}");
    let missing: Vec<&String> = wanted.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(missing.is_empty(), "not on /metrics: {missing:?}");
    server.stop().await;
}
