#!/usr/bin/env python3
"""Check the dashboards and the alert rules; not run by CI.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install promql-parser pyyaml
    /tmp/v/bin/python deploy/grafana/validate.py

Two dashboards: tollgate-dashboard.json (tollgate's own series) and
envoyproxy-ratelimit-dashboard.json (envoyproxy/ratelimit's statistics, ratelimit_service_*,
plus a few tollgate series). Checks for each: its uid; its structure (schema version,
variables and the series they come from, data sources, unique ids, panels inside the 24-column
grid without overlaps); every PromQL expression of the dashboard (Grafana variables replaced by
sample values) and of the rules parses with promql-parser, and with promtool when it is on the
PATH (`promtool check rules` on the rules and on each dashboard's queries written as recording
rules, then `promtool test rules`); only the metric names allowed for that dashboard are used
(the rules: tollgate's only); with promql-parser, every series selector of a dashboard filters
by $job and $instance, and by the dashboard's other variables where its series carry them. The
rules file indented under `spec:` is a PrometheusRule with the same groups; each alert has
`for`, a severity and summary/description annotations. A missing parser is a failure, not a
skip.
"""
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PROM = HERE.parent / "prometheus"
RULES = PROM / "tollgate-alerts.yaml"
RULE_TESTS = PROM / "tollgate-alerts.test.yaml"

# The metric names of the observability issue (final).
METRICS = {
    "tollgate_requests_total", "tollgate_limit_decisions_total", "tollgate_limit_hits_total",
    "tollgate_decision_duration_seconds", "tollgate_store_duration_seconds", "tollgate_store_up",
    "tollgate_ready", "tollgate_config_reloads_total",
    "tollgate_config_last_reload_success_timestamp_seconds", "tollgate_local_cache_hits_total",
    "tollgate_store_failures_total", "tollgate_refunds_total",
}
# envoyproxy/ratelimit's statistics as its statsd_exporter mapping names them (its built-in
# default_mapper.yaml and Envoy Gateway's statsd_conf.yaml agree on these): counters, labels
# domain, key1[, key2]; should_rate_limit_error: err_type.
ENVOYPROXY_METRICS = {
    "ratelimit_service_rate_limit_total_hits", "ratelimit_service_rate_limit_over_limit",
    "ratelimit_service_rate_limit_near_limit", "ratelimit_service_rate_limit_within_limit",
    "ratelimit_service_rate_limit_shadow_mode", "ratelimit_service_should_rate_limit_error",
}
GRAFANA_VARS = {"__rate_interval": "1m", "__interval": "30s", "__range": "6h",
                "job": ".*", "instance": ".*", "domain": ".*", "limit": ".*", "key1": ".*"}
METRIC_NAME = re.compile(r"\b(?:tollgate|ratelimit)_\w*")

# Per dashboard: the file, its uid, its query variables and the series each comes from, the
# metric names its queries may use, and which labels the selectors of a metric must filter on
# by the variable of the same name (every selector: job and instance).
DASHBOARDS = [
    {"file": HERE / "tollgate-dashboard.json", "uid": "tollgate-overview",
     "variables": {"job": "tollgate_ready", "instance": "tollgate_ready",
                   "domain": "tollgate_limit_decisions_total",
                   "limit": "tollgate_limit_decisions_total"},
     "metrics": METRICS,
     "filters": {"tollgate_limit_decisions_total": ("domain", "limit"),
                 "tollgate_limit_hits_total": ("domain", "limit"),
                 "tollgate_requests_total": ("domain",)}},
    {"file": HERE / "envoyproxy-ratelimit-dashboard.json", "uid": "tollgate-envoyproxy-stats",
     "variables": dict.fromkeys(("job", "instance", "domain", "key1"),
                                "ratelimit_service_rate_limit_total_hits"),
     "metrics": METRICS | ENVOYPROXY_METRICS,
     "filters": {m: ("domain", "key1") for m in ENVOYPROXY_METRICS
                 if m.startswith("ratelimit_service_rate_limit_")}},
]

PROMETHEUS_RULE_HEAD = """apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: tollgate
spec:
"""

errors = []


def fail(msg):
    errors.append(msg)


def substitute(expr, variables):
    """Grafana's $__ variables and the dashboard's `variables` replaced by sample values."""
    def repl(m):
        name = m.group(1) or m.group(2)
        if name not in GRAFANA_VARS or not (name.startswith("__") or name in variables):
            fail(f"unknown Grafana variable ${name} in: {expr}")
            return m.group(0)
        return GRAFANA_VARS[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def check_dashboard(spec, d):
    """Structure checks; returns the (where, PromQL) pairs to parse, and the panels' queries
    as written."""
    f = spec["file"].name

    def fail(msg):
        errors.append(f"{f}: {msg}")

    if d.get("uid") != spec["uid"]:
        fail(f"uid {d.get('uid')!r}, expected {spec['uid']!r}")
    if d.get("schemaVersion", 0) < 36:
        fail("schemaVersion < 36")
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail("no datasource variable of type prometheus")
    exprs = []
    for name, source in spec["variables"].items():
        v = variables.get(name)
        if not v or v["type"] != "query":
            fail(f"no query variable {name}")
            continue
        m = re.fullmatch(r"label_values\(((\w+).*),\s*(\w+)\)", v["query"])
        if not m or v.get("definition") != v["query"] or m.group(3) != name:
            fail(f"variable {name}: not label_values(selector, {name}): {v['query']}")
            continue
        if m.group(2) != source:
            fail(f"variable {name} does not come from {source}: {v['query']}")
        exprs.append((f"{f} variable {name}", substitute(m.group(1), spec["variables"])))
    extra = set(variables) - set(spec["variables"]) - {"datasource"}
    if extra:
        fail(f"variables {sorted(extra)} are not substituted by this check")
    panel_exprs = []
    ids, cells, overlaps = set(), {}, set()
    for p in d["panels"]:
        if p["id"] in ids:
            fail(f"duplicate panel id {p['id']}")
        ids.add(p["id"])
        g = p["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            fail(f"panel {p['title']!r} outside the grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells and (cells[(x, y)], p["title"]) not in overlaps:
                    overlaps.add((cells[(x, y)], p["title"]))
                    fail(f"panel {p['title']!r} overlaps {cells[(x, y)]!r}")
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"panel {p['title']!r} does not use $datasource")
        for t in p["targets"]:
            if t.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"panel {p['title']!r} target {t['refId']} does not use $datasource")
            where = f"{f} panel {p['title']!r} {t['refId']}"
            exprs.append((where, substitute(t["expr"], spec["variables"])))
            panel_exprs.append((where, t["expr"]))
    return exprs, panel_exprs


def check_rules(doc):
    exprs = []
    for group in doc["groups"]:
        for r in group["rules"]:
            a = r.get("alert")
            if not a:
                fail(f"rule without alert name: {r}")
                continue
            if "for" not in r:
                fail(f"{a}: no for")
            if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                fail(f"{a}: no severity label")
            if not {"summary", "description"} <= set(r.get("annotations", {})):
                fail(f"{a}: summary and description annotations needed")
            exprs.append((f"alert {a}", r["expr"]))
    return exprs


def base_name(n):
    return re.sub(r"_(bucket|sum|count)$", "", n)


def check_metric_names(exprs, allowed):
    """Every tollgate_* / ratelimit_* token of the queries is an allowed metric (any parser)."""
    for where, e in exprs:
        for n in METRIC_NAME.findall(e):
            if base_name(n) not in allowed:
                fail(f"{where}: {n} is not a metric this file may use")


def check_selectors(panel_exprs, spec, promql_parser):
    """With promql-parser: every series selector of a panel query names an allowed metric and
    has the matchers job=~"$job", instance=~"$instance" and label=~"$label" for each label
    spec["filters"] lists for its metric. Parsed with only Grafana's own $__ variables
    replaced, so that the matchers still hold the variable names."""
    f = spec["file"].name
    for where, raw in panel_exprs:
        e = re.sub(r"\$(__\w+)", lambda m: GRAFANA_VARS[m.group(1)], raw)
        selectors = []

        def visit(node):
            if isinstance(node, promql_parser.VectorSelector):
                selectors.append(node)

        try:
            promql_parser.walk(promql_parser.parse(e), visit)
        except Exception:  # a parse failure is reported by the parse check
            continue
        for sel in selectors:
            name = base_name(sel.name or "")
            if name not in spec["metrics"]:
                fail(f"{where}: selector {sel.name!r} is not a metric {f} may use")
                continue
            regex = {m.name: m.value for m in sel.matchers.matchers
                     if m.op == promql_parser.MatchOp.Re}
            for label in ("job", "instance", *spec["filters"].get(name, ())):
                if regex.get(label) != f"${label}":
                    fail(f'{where}: {sel.name} has no matcher {label}=~"${label}"')


def promtool(*args):
    r = subprocess.run(["promtool", *args], capture_output=True, text=True)
    if r.returncode:
        fail(f"promtool {' '.join(args)}:\n{r.stdout}{r.stderr}")
    return r.returncode == 0


def main():
    dashboards = []  # (spec, its exprs, its panel queries unsubstituted)
    for spec in DASHBOARDS:
        exprs, panel_exprs = check_dashboard(spec, json.loads(spec["file"].read_text()))
        check_metric_names(exprs, spec["metrics"])
        dashboards.append((spec, exprs, panel_exprs))
    uids = [json.loads(spec["file"].read_text()).get("uid") for spec in DASHBOARDS]
    if len(set(uids)) != len(uids):
        fail(f"dashboard uids are not unique: {uids}")
    dash_exprs = [e for _, exprs, _ in dashboards for e in exprs]
    rules = yaml.safe_load(RULES.read_text())
    rule_exprs = check_rules(rules)
    check_metric_names(rule_exprs, METRICS)
    # The README's PrometheusRule: every line of the file indented under `spec:` (sed 's/^/  /').
    cr = yaml.safe_load(PROMETHEUS_RULE_HEAD + "".join(
        "  " + line for line in RULES.read_text().splitlines(True)))
    if cr.get("spec") != rules or cr.get("kind") != "PrometheusRule":
        fail("the rules indented under spec: do not form a PrometheusRule with these groups")
    parsers = []
    try:
        import promql_parser
        parsers.append("promql-parser")
        for where, e in dash_exprs + rule_exprs:
            try:
                promql_parser.parse(e)
            except Exception as exc:  # the parser raises ValueError or its own errors
                fail(f"{where}: promql-parser: {exc}\n{e}")
        if hasattr(promql_parser, "walk"):
            for spec, _, panel_exprs in dashboards:
                check_selectors(panel_exprs, spec, promql_parser)
        else:
            fail("promql-parser without walk(): pip install 'promql-parser>=0.12'")
    except ImportError:
        pass
    if shutil.which("promtool"):
        parsers.append("promtool")
        with tempfile.TemporaryDirectory() as tmp:
            for spec, exprs, _ in dashboards:
                rec = {"groups": [{"name": "dashboard", "rules": [
                    {"record": f"dashboard:query:{i}", "expr": e}
                    for i, (_, e) in enumerate(exprs)]}]}
                path = Path(tmp) / spec["file"].with_suffix(".rules.yaml").name
                path.write_text(yaml.safe_dump(rec))
                promtool("check", "rules", str(path))
        promtool("check", "rules", str(RULES))
        promtool("test", "rules", str(RULE_TESTS))
    if not parsers:
        fail("no PromQL parser: pip install promql-parser, or put promtool on the PATH")
    for e in errors:
        print("FAIL:", e)
    counts = ", ".join(f"{spec['file'].name}: {len(exprs)} queries" for spec, exprs, _ in dashboards)
    print(f"{counts}; {len(rule_exprs)} alert expressions; "
          f"parsed with {' and '.join(parsers) or 'nothing'}: "
          f"{'OK' if not errors else f'{len(errors)} problem(s)'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
