#!/usr/bin/env python3
"""Print every tollgate_* metric name that the dashboard's and the alert rules' PromQL uses.

    python3 deploy/grafana/metric_names.py                  # one base name a line, sorted
    python3 deploy/grafana/metric_names.py --check FILE     # FILE: a /metrics scrape; lists the
                                                            # names missing from it, exit 1 if any

Reads the panel queries and variable queries of tollgate-dashboard.json and every `expr` of
../prometheus/tollgate-alerts.yaml. Histogram series suffixes (_bucket, _sum, _count) are
stripped, so the names match the `# TYPE` lines of /metrics. Standard library only.
"""
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE / "tollgate-dashboard.json"
RULES = HERE.parent / "prometheus" / "tollgate-alerts.yaml"

NAME = re.compile(r"\btollgate_[a-zA-Z0-9_]*")
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


def names():
    queries = list(dashboard_queries(json.loads(DASHBOARD.read_text())))
    queries += rule_exprs(RULES.read_text())
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
    wanted = names()
    if len(argv) == 3 and argv[1] == "--check":
        missing = [n for n in wanted if n not in exposed(Path(argv[2]).read_text())]
        for n in missing:
            print(f"missing from {argv[2]}: {n}")
        return 1 if missing else 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
