#!/usr/bin/env python3
"""Check the dashboard and the alert rules; not run by CI.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install promql-parser pyyaml
    /tmp/v/bin/python deploy/grafana/validate.py

Checks: the dashboard's structure (schema version, variables, data sources, unique ids, panels
inside the 24-column grid without overlaps); every PromQL expression of the dashboard (Grafana
variables replaced by sample values) and of the rules parses with promql-parser, and with
promtool when it is on the PATH (`promtool check rules` on the rules and on the dashboard's
queries written as recording rules, then `promtool test rules`); the rules file indented
under `spec:` is a PrometheusRule with the same groups; each alert has `for`, a severity and
summary/description annotations; only the contract's metric names are used. A missing parser
is a failure, not a skip.
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
DASHBOARD = HERE / "tollgate-dashboard.json"
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
GRAFANA_VARS = {"__rate_interval": "1m", "__interval": "30s", "__range": "6h",
                "job": ".*", "instance": ".*", "domain": ".*", "limit": ".*"}

PROMETHEUS_RULE_HEAD = """apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: tollgate
spec:
"""

errors = []


def fail(msg):
    errors.append(msg)


def substitute(expr):
    def repl(m):
        name = m.group(1) or m.group(2)
        if name not in GRAFANA_VARS:
            fail(f"unknown Grafana variable ${name} in: {expr}")
            return m.group(0)
        return GRAFANA_VARS[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def check_dashboard(d):
    """Structure checks; returns the (where, PromQL) pairs to parse."""
    if d.get("schemaVersion", 0) < 36:
        fail("schemaVersion < 36")
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail("no datasource variable of type prometheus")
    exprs = []
    for name in ("job", "instance", "domain", "limit"):
        v = variables.get(name)
        if not v or v["type"] != "query":
            fail(f"no query variable {name}")
            continue
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", v["query"])
        if not m or v.get("definition") != v["query"]:
            fail(f"variable {name}: not label_values(selector, label): {v['query']}")
            continue
        exprs.append((f"variable {name}", substitute(m.group(1))))
    for name in ("domain", "limit"):
        if "tollgate_limit_decisions_total" not in variables.get(name, {}).get("query", ""):
            fail(f"variable {name} does not come from tollgate_limit_decisions_total")
    ids, cells = set(), {}
    for p in d["panels"]:
        if p["id"] in ids:
            fail(f"duplicate panel id {p['id']}")
        ids.add(p["id"])
        g = p["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            fail(f"panel {p['title']!r} outside the grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    fail(f"panel {p['title']!r} overlaps {cells[(x, y)]!r}")
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"panel {p['title']!r} does not use $datasource")
        for t in p["targets"]:
            if t.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"panel {p['title']!r} target {t['refId']} does not use $datasource")
            exprs.append((f"panel {p['title']!r} {t['refId']}", substitute(t["expr"])))
    return exprs


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


def check_metric_names(exprs):
    for where, e in exprs:
        for n in re.findall(r"\btollgate_\w*", e):
            if re.sub(r"_(bucket|sum|count)$", "", n) not in METRICS:
                fail(f"{where}: {n} is not a tollgate metric")


def promtool(*args):
    r = subprocess.run(["promtool", *args], capture_output=True, text=True)
    if r.returncode:
        fail(f"promtool {' '.join(args)}:\n{r.stdout}{r.stderr}")
    return r.returncode == 0


def main():
    dashboard = json.loads(DASHBOARD.read_text())
    rules = yaml.safe_load(RULES.read_text())
    dash_exprs = check_dashboard(dashboard)
    rule_exprs = check_rules(rules)
    check_metric_names(dash_exprs + rule_exprs)
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
    except ImportError:
        pass
    if shutil.which("promtool"):
        parsers.append("promtool")
        with tempfile.TemporaryDirectory() as tmp:
            rec = {"groups": [{"name": "dashboard", "rules": [
                {"record": f"dashboard:query:{i}", "expr": e}
                for i, (_, e) in enumerate(dash_exprs)]}]}
            (Path(tmp) / "dashboard.yaml").write_text(yaml.safe_dump(rec))
            promtool("check", "rules", str(Path(tmp) / "dashboard.yaml"))
        promtool("check", "rules", str(RULES))
        promtool("test", "rules", str(RULE_TESTS))
    if not parsers:
        fail("no PromQL parser: pip install promql-parser, or put promtool on the PATH")
    for e in errors:
        print("FAIL:", e)
    print(f"{len(dash_exprs)} dashboard queries, {len(rule_exprs)} alert expressions, "
          f"parsed with {' and '.join(parsers) or 'nothing'}: "
          f"{'OK' if not errors else f'{len(errors)} problem(s)'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
