//! The mapper against statsd_exporter's behaviour: globs, regexes, templates, defaults,
//! escaping, errors with lines, and Envoy Gateway's own mapping file.

use super::*;
use crate::telemetry::stats::mapper::kind::{
    SummaryQuantile, TimerType, DEFAULT_BUCKETS, DEFAULT_QUANTILES,
};

const EG: &str = include_str!("../../../../tests/fixtures/envoy-gateway/statsd_conf.yaml");

fn eg() -> Mapper {
    Mapper::parse(EG, "statsd_conf.yaml").expect("Envoy Gateway's mapping parses")
}

fn metric(m: &Mapper, name: &str, kind: StatKind) -> Mapped {
    match m.map(name, kind) {
        Mapping::Metric(mapped) => mapped,
        Mapping::Drop => panic!("{name} was dropped"),
    }
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn histogram(name: &str, l: &[(&str, &str)]) -> Mapped {
    Mapped {
        name: name.to_string(),
        labels: labels(l),
        timer_type: TimerType::Histogram,
        buckets: Some(DEFAULT_BUCKETS.to_vec()),
        quantiles: None,
        help: None,
        scale: None,
        matched: true,
    }
}

fn summary(name: &str, l: &[(&str, &str)], matched: bool) -> Mapped {
    Mapped {
        name: name.to_string(),
        labels: labels(l),
        timer_type: TimerType::Summary,
        buckets: None,
        quantiles: Some(DEFAULT_QUANTILES.to_vec()),
        help: None,
        scale: None,
        matched,
    }
}

fn parse(yaml: &str) -> Mapper {
    Mapper::parse(yaml, "test.yaml").expect("the test mapping parses")
}

fn error(yaml: &str) -> MapperError {
    Mapper::parse(yaml, "test.yaml").expect_err("the test mapping is refused")
}

const GATEWAY_KEY: &str = "ratelimit.service.rate_limit.default/eg/http.httproute/default/backend/rule/0/match/0/www_example_com_httproute/default/backend/rule/0/match/0/www_example_com.rule-0-match-0_one.over_limit";

#[test]
fn envoy_gateway_route_key_takes_the_three_level_regex() {
    for m in [&eg(), Mapper::envoyproxy_default()] {
        for kind in StatKind::ALL {
            assert_eq!(
                metric(m, GATEWAY_KEY, kind),
                histogram(
                    "ratelimit_service_rate_limit_over_limit",
                    &[
                        ("domain", "default/eg/http"),
                        ("key1", "httproute/default/backend/rule/0/match/0/www_example_com_httproute/default/backend/rule/0/match/0/www_example_com"),
                        ("key2", "rule-0-match-0_one"),
                    ],
                )
            );
        }
    }
}

#[test]
fn two_level_keys_take_the_globs_whatever_their_characters() {
    let m = eg();
    assert_eq!(
        metric(
            &m,
            "ratelimit.service.rate_limit.mydomain.tenant.over_limit",
            StatKind::Counter
        ),
        histogram(
            "ratelimit_service_rate_limit_over_limit",
            &[("domain", "mydomain"), ("key1", "tenant")]
        )
    );
    assert_eq!(
        metric(
            &m,
            "ratelimit.service.rate_limit.default/eg/http.path_/a b:c-d.within_limit",
            StatKind::Counter
        ),
        histogram(
            "ratelimit_service_rate_limit_within_limit",
            &[("domain", "default/eg/http"), ("key1", "path_/a b:c-d")]
        )
    );
    // An empty component is one too.
    assert_eq!(
        metric(
            &m,
            "ratelimit.service.rate_limit.d..total_hits",
            StatKind::Counter
        ),
        histogram(
            "ratelimit_service_rate_limit_total_hits",
            &[("domain", "d"), ("key1", "")]
        )
    );
}

#[test]
fn three_and_more_levels_take_the_regexes() {
    let m = eg();
    let three = "ratelimit.service.rate_limit.mydomain.k1_v1.k2_v2.near_limit";
    assert_eq!(
        metric(&m, three, StatKind::Counter),
        histogram(
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "mydomain"), ("key1", "k1_v1"), ("key2", "k2_v2")]
        )
    );
    // The fourth level and beyond fall into the unused group.
    let five = "ratelimit.service.rate_limit.d.a.b.c.e.shadow_mode";
    assert_eq!(
        metric(&m, five, StatKind::Counter),
        histogram(
            "ratelimit_service_rate_limit_shadow_mode",
            &[("domain", "d"), ("key1", "a"), ("key2", "b")]
        )
    );
    // statsd_exporter searches for a regex, it does not anchor it.
    let inside = "x.ratelimit.service.rate_limit.d.a.b.total_hits.y";
    assert_eq!(
        metric(&m, inside, StatKind::Gauge).name,
        "ratelimit_service_rate_limit_total_hits"
    );
}

#[test]
fn should_rate_limit_errors_are_counters_only() {
    for m in [&eg(), Mapper::envoyproxy_default()] {
        let name = "ratelimit.service.call.should_rate_limit.redis_error";
        let counter = metric(m, name, StatKind::Counter);
        assert_eq!(counter.name, "ratelimit_service_should_rate_limit_error");
        assert_eq!(counter.labels, labels(&[("err_type", "redis_error")]));
        assert!(counter.matched);
        assert_eq!(
            metric(m, name, StatKind::Gauge),
            summary(
                "ratelimit_service_call_should_rate_limit_redis_error",
                &[],
                false
            )
        );
    }
}

#[test]
fn server_and_config_statistics() {
    let gateway = eg();
    let default = Mapper::envoyproxy_default();
    let time = "ratelimit_server.ShouldRateLimit.response_time";
    let expected = histogram(
        "ratelimit_service_response_time_seconds",
        &[("grpc_method", "ShouldRateLimit")],
    );
    assert_eq!(metric(&gateway, time, StatKind::Timer), expected);
    // envoyproxy/ratelimit's own mapping turns its milliseconds into seconds.
    assert_eq!(
        metric(default, time, StatKind::Timer),
        Mapped {
            scale: Some(0.001),
            ..expected
        }
    );
    for m in [&gateway, default] {
        let total = metric(
            m,
            "ratelimit_server.ShouldRateLimit.total_requests",
            StatKind::Counter,
        );
        assert_eq!(total.name, "ratelimit_service_total_requests");
        assert_eq!(total.labels, labels(&[("grpc_method", "ShouldRateLimit")]));
        let loaded = metric(
            m,
            "ratelimit.service.config_load_success",
            StatKind::Counter,
        );
        assert_eq!(
            loaded,
            summary("ratelimit_service_config_load_success", &[], true)
        );
        // A gauge of that name matches nothing: its name is escaped.
        assert!(!metric(m, "ratelimit.service.config_load_success", StatKind::Gauge).matched);
    }
}

#[test]
fn unmatched_names_are_escaped_as_statsd_exporter_does() {
    let m = eg();
    let unmatched = |name: &str| metric(&m, name, StatKind::Gauge).name;
    assert_eq!(
        unmatched("ratelimit.go.totalAlloc"),
        "ratelimit_go_totalAlloc"
    );
    assert_eq!(unmatched("0abc.d"), "_0abc_d");
    assert_eq!(unmatched("a--b---c-d"), "a_b_c_d");
    assert_eq!(unmatched("a-.-b"), "a___b");
    assert_eq!(unmatched("héllo/wörld"), "h_llo_w_rld");
    assert_eq!(m.map("", StatKind::Gauge), Mapping::Drop);
    assert_eq!(escape_metric_name("already_fine_1"), "already_fine_1");
}

const DROPS: &str = r#"
mappings:
- match: "ratelimit.go.*"
  name: "dropped"
  action: drop
- match: "ratelimit.*.*"
  name: "ratelimit_${1}_$2"
  action: map
  help: "Everything else."
"#;

#[test]
fn drop_actions_drop() {
    let m = parse(DROPS);
    assert_eq!(
        m.map("ratelimit.go.numGoroutines", StatKind::Gauge),
        Mapping::Drop
    );
    let kept = metric(&m, "ratelimit.redis.pool_total", StatKind::Gauge);
    assert_eq!(kept.name, "ratelimit_redis_pool_total");
    assert_eq!(kept.help.as_deref(), Some("Everything else."));
    // A name that maps to nothing is dropped too.
    let empty = parse("mappings:\n- match: '(.*)'\n  match_type: regex\n  name: '$1'\n");
    assert_eq!(empty.map("", StatKind::Counter), Mapping::Drop);
    assert_eq!(metric(&empty, "a.b", StatKind::Counter).name, "a_b");
}

#[test]
fn regex_references_follow_go() {
    let m = parse(
        r#"
defaults:
  match_type: regex
mappings:
- match: 'limit\.(?P<dom>[^.]+)\.(\d+)\.hits'
  name: "hits_${1}_total"
  labels:
    domain: "$dom"
    code: "$2"
    glued: "$1_x"
    literal: "$$1"
    missing: "$9"
    fixed: 200
"#,
    );
    let mapped = metric(&m, "limit.dom-a.42.hits", StatKind::Counter);
    assert_eq!(mapped.name, "hits_dom_a_total");
    assert_eq!(
        mapped.labels,
        labels(&[
            ("domain", "dom-a"),
            ("code", "42"),
            ("glued", ""),
            ("literal", "$1"),
            ("missing", ""),
            ("fixed", "200"),
        ])
    );
}

#[test]
fn glob_references_follow_statsd_exporter() {
    let m = parse(
        r#"
mappings:
- match: "a.*.*"
  name: "x_$1"
  labels:
    both: "${1}-${2}"
    run: "$1$2"
    glued: "$1_x"
    out_of_range: "<$3>"
    braced_only: "${2"
    dollar: "cost $ 5"
"#,
    );
    let mapped = metric(&m, "a.one.two", StatKind::Counter);
    assert_eq!(mapped.name, "x_one");
    assert_eq!(
        mapped.labels,
        labels(&[
            ("both", "one-two"),
            ("run", ""),
            ("glued", ""),
            ("out_of_range", "<>"),
            ("braced_only", "two"),
            ("dollar", "cost $ 5"),
        ])
    );
}

#[test]
fn globs_win_over_earlier_regexes_and_first_glob_wins() {
    let m = parse(
        r#"
mappings:
- match: 'a\.(.*)'
  match_type: regex
  name: regex
- match: "a.*.c"
  name: first
- match: "a.b.*"
  name: second
- match: "a.*.*.*"
  name: third
  match_metric_type: gauge
"#,
    );
    assert_eq!(metric(&m, "a.b.c", StatKind::Counter).name, "first");
    assert_eq!(metric(&m, "a.b.d", StatKind::Counter).name, "second");
    assert_eq!(metric(&m, "a.x.y.z", StatKind::Gauge).name, "third");
    // Not a gauge: the glob is not for it, the regex is.
    assert_eq!(metric(&m, "a.x.y.z", StatKind::Timer).name, "regex");
    assert_eq!(metric(&m, "a.x", StatKind::Counter).name, "regex");
}

#[test]
fn regex_metric_type_lets_the_next_regex_try() {
    let m = parse(
        r#"
mappings:
- match: '^a\.(.*)$'
  match_type: regex
  match_metric_type: observer
  name: timers
  observer_type: histogram
  buckets: [1, 2]
- match: '^a\.(.*)$'
  match_type: regex
  match_metric_type: timer
  name: never
- match: '^a\.(.*)$'
  match_type: regex
  name: others
"#,
    );
    let timer = metric(&m, "a.b", StatKind::Timer);
    assert_eq!(
        (timer.name.as_str(), timer.buckets),
        ("timers", Some(vec![1.0, 2.0]))
    );
    assert_eq!(metric(&m, "a.b", StatKind::Counter).name, "others");
}

#[test]
fn glob_state_machine_quirks_are_kept() {
    let m = parse(
        r#"
mappings:
- match: "a.b.c"
  name: long
- match: "a.b"
  name: prefix_of_an_earlier_glob
- match: "x.*"
  name: x_first
- match: "x.y"
  name: x_literal
- match: "x.*"
  name: x_again
"#,
    );
    // `a.b` ends where `a.b.c` passes: statsd_exporter never matches it.
    assert!(!metric(&m, "a.b", StatKind::Counter).matched);
    // The repeated `x.*` keeps the first mapping but moves behind `x.y`.
    assert_eq!(metric(&m, "x.y", StatKind::Counter).name, "x_literal");
    assert_eq!(metric(&m, "x.z", StatKind::Counter).name, "x_first");
}

#[test]
fn glob_disable_ordering_prefers_the_most_literal_glob() {
    let yaml = "defaults:\n  glob_disable_ordering: true\nmappings:\n- match: 'a.*.*'\n  name: stars\n- match: 'a.*.c'\n  name: one_star\n- match: 'a.b.*'\n  name: b_first\n";
    let m = parse(yaml);
    assert_eq!(metric(&m, "a.b.c", StatKind::Counter).name, "b_first");
    assert_eq!(metric(&m, "a.x.c", StatKind::Counter).name, "one_star");
    assert_eq!(metric(&m, "a.x.y", StatKind::Counter).name, "stars");
    let ordered = parse(&yaml.replace("true", "false"));
    assert_eq!(metric(&ordered, "a.b.c", StatKind::Counter).name, "stars");
}

#[test]
fn timer_options_come_from_the_mapping_then_the_defaults() {
    let m = parse(
        r#"
defaults:
  timer_type: histogram
  buckets: [0.1, 1]
  quantiles: [{quantile: 0.5, error: 0.1}]
  ttl: 5m
mappings:
- match: "h.*"
  name: h
- match: "s.*"
  name: s
  observer_type: summary
  timer_type: histogram
  summary_options:
    quantiles: [{quantile: 0.99, error: 0.001}]
    max_age: 30s
- match: "o.*"
  name: o
  histogram_options:
    buckets: [5]
  ttl: 1h30m
"#,
    );
    let h = metric(&m, "h.x", StatKind::Timer);
    assert_eq!(
        (h.timer_type, h.buckets, h.quantiles),
        (TimerType::Histogram, Some(vec![0.1, 1.0]), None)
    );
    let s = metric(&m, "s.x", StatKind::Timer);
    let q = SummaryQuantile {
        quantile: 0.99,
        error: 0.001,
    };
    assert_eq!(
        (s.timer_type, s.buckets, s.quantiles),
        (TimerType::Summary, None, Some(vec![q]))
    );
    assert_eq!(metric(&m, "o.x", StatKind::Timer).buckets, Some(vec![5.0]));
    // Unmatched statistics take the defaults too.
    assert_eq!(
        metric(&m, "zzz", StatKind::Timer).buckets,
        Some(vec![0.1, 1.0])
    );
    let plain = parse("mappings: []");
    assert_eq!(
        metric(&plain, "t", StatKind::Timer),
        summary("t", &[], false)
    );
}

#[test]
fn empty_files_map_nothing() {
    for yaml in ["", "# nothing\n", "mappings:\n", "---\n"] {
        assert!(
            !metric(&parse(yaml), "a.b", StatKind::Counter).matched,
            "{yaml:?}"
        );
    }
}

#[test]
fn errors_name_the_file_and_line() {
    let e = error("mappings:\n- match: \"a.*\"\n  name: [unclosed\n");
    assert_eq!((e.file.as_str(), e.line), ("test.yaml", Some(3)), "{e}");
    assert!(e.to_string().starts_with("test.yaml:3: "), "{e}");
    let e = error("mappings:\n- match: \"a.*\"\n  name: x\n\tlabels: {}\n");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.message.starts_with("found a tab character"), "{e}");
    let e = error("mappings:\n- match: a.*\n  name: x\n  labels: {a: b\n");
    assert!(
        e.message.contains("did not find expected ',' or '}'"),
        "{e}"
    );

    let bad_regex = "mappings:\n- match: a.*\n  name: ok\n\n  # the bad one\n- match: 'a(b'\n  match_type: regex\n  name: bad\n";
    let e = error(bad_regex);
    assert_eq!(e.line, Some(6), "{e}");
    assert!(
        e.to_string()
            .starts_with("test.yaml:6: invalid regex \"a(b\""),
        "{e}"
    );

    let e = error(
        "mappings:\n  - match: a.*\n    name: ok\n  - match: b.*\n    name: ok\n    matchh: x\n",
    );
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("unknown field `matchh`"), "{e}");

    let cases = [
        ("  match_type: fuzzy\n", "invalid match_type \"fuzzy\""),
        ("  action: keep\n", "invalid action \"keep\""),
        (
            "  match_metric_type: histogram\n",
            "invalid match_metric_type",
        ),
        ("  timer_type: hist\n", "invalid timer_type \"hist\""),
        ("  labels: {a: x}\n", "invalid label key: \"a\""),
        ("  labels: {bad-key: x}\n", "invalid label key"),
        ("  ttl: 5 minutes\n", "invalid ttl"),
        (
            "  timer_type: histogram\n  summary_options: {}\n",
            "cannot use histogram observer and summary options",
        ),
        (
            "  buckets: [1]\n  histogram_options: {buckets: [2]}\n",
            "cannot use buckets in both",
        ),
    ];
    for (extra, message) in cases {
        let yaml =
            format!("mappings:\n- match: a.*\n  name: ok\n- match: b.*\n  name: fine\n{extra}");
        let e = error(&yaml);
        assert_eq!(e.line, Some(4), "{yaml}: {e}");
        assert!(e.message.contains(message), "{yaml}: {e}");
    }
    for (mapping, message) in [
        ("- match: a.*\n", "didn't set a metric name"),
        ("- match: a.*\n  name: 9lives\n", "is not a metric name"),
        ("- match: a.*\n  name: a.b\n", "is not a metric name"),
        ("- match: 'a*.b'\n  name: x\n", "invalid match"),
        ("- match: 'a/b.c'\n  name: x\n", "invalid match"),
    ] {
        let e = error(&format!("# comment\nmappings:\n{mapping}"));
        assert_eq!(e.line, Some(3), "{mapping}: {e}");
        assert!(e.message.contains(message), "{mapping}: {e}");
    }
    let e = error("defaults:\n  observer_type: nope\nmappings: []\n");
    assert_eq!(e.line, Some(1), "{e}");
    assert_eq!(
        MapperError {
            file: "f".into(),
            line: None,
            message: "m".into()
        }
        .to_string(),
        "f: m"
    );
}
