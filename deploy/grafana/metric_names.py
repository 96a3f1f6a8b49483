#!/usr/bin/env python3
"""Print every metric name (tollgate_*, ratelimit_*) that a dashboard's PromQL uses.

    python3 deploy/grafana/metric_names.py                  # one base name a line, sorted
    python3 deploy/grafana/metric_names.py --check FILE     # FILE: a /metrics scrape; lists the
                                                            # names missing from it, exit 1 if any
    python3 deploy/grafana/metric_names.py --dashboard envoyproxy [--check FILE]

--dashboard tollgate (the default): the panel queries and variable queries of
tollgate-dashboard.json and every `expr` of ../prometheus/tollgate-alerts.yaml.
--dashboard envoyproxy: those of envoyproxy-ratelimit-dashboard.json (envoyproxy/ratelimit's
ratelimit_service_* series and the tollgate_* series it shows beside them).
Histogram series suffixes (_bucket, _sum, _count) are stripped, so the names match the
`# TYPE` lines of /metrics. Standard library only.
"""
import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE.parent / "prometheus" / "tollgate-alerts.yaml"
# --dashboard NAME: (the dashboard, the rules files read with it)
DASHBOARDS = {
    "tollgate": (HERE / "tollgate-dashboard.json", [RULES]),
    "envoyproxy": (HERE / "envoyproxy-ratelimit-dashboard.json", []),
}

NAME = re.compile(r"\b(?:tollgate|ratelimit)_[a-zA-Z0-9_]*")
SUFFIX = re.compile(r"_(bucket|sum|count)$")


def dashboard_queries(node):
    """Panel `expr`s and templating `query`/`definition` strings, anywhere in the JSON."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield value
            else:
                yield from dashboard_queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_queries(item)


def rule_exprs(text):
    """The `expr` of every rule: `expr: ...` on one line, or a `|` / `>` block under it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:-\s+)?expr:\s*(.*)$", line)
        if not m:
            continue
        value = m.group(2).strip()
        if value and value[0] not in "|>":
            yield value.strip("'\"")
            continue
        indent = len(m.group(1))
        block = []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            block.append(nxt)
        yield "\n".join(block)


def names(dashboard="tollgate"):
    path, rules = DASHBOARDS[dashboard]
    queries = list(dashboard_queries(json.loads(path.read_text())))
    for r in rules:
        queries += rule_exprs(r.read_text())
    return sorted({SUFFIX.sub("", n) for q in queries for n in NAME.findall(q)})


def exposed(metrics_text):
    """Metric family names in a Prometheus text exposition (TYPE lines and samples)."""
    found = set()
    for line in metrics_text.splitlines():
        m = re.match(r"#\s*TYPE\s+(\S+)", line)
        if m:
            found.add(m.group(1))
        elif line and not line.startswith("#"):
            found.add(SUFFIX.sub("", re.split(r"[{\s]", line, 1)[0]))
    return found


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dashboard", choices=sorted(DASHBOARDS), default="tollgate")
    ap.add_argument("--check", metavar="FILE", help="a /metrics scrape: list the names missing")
    args = ap.parse_args(argv[1:])
    wanted = names(args.dashboard)
    if args.check:
        missing = [n for n in wanted if n not in exposed(Path(args.check).read_text())]
        for n in missing:
            print(f"missing from {args.check}: {n}")
        return 1 if missing else 0
    print("\n".join(wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
