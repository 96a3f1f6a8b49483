#!/usr/bin/env bash
# What two per-call steps cost, in instructions (valgrind's callgrind, which counts the same
# whatever else the box is doing): the price lookup of a `spend:` charge (plan::price::cost, its
# inclusive count per call) and the connection's idle tracking around each gRPC call (the
# `Tracked` wrapper's boxed future: its inclusive count less the call it wraps), against the
# instructions per decision. Runs TOLLGATE (default target/release/tollgate) on the memory
# store with examples/llm-gateway.yaml, one serving thread, under a closed loop of money
# charges (`tenant_spend`, model gpt-4o, input tokens, 1,000 tokens a call) for SECONDS.
#
#   scripts/bench-call-costs.sh [SECONDS] [TOLLGATE]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

SECONDS_EACH=${1:-10}
TG=${2:-target/release/tollgate}
need valgrind callgrind_annotate python3 curl
BENCH=target/release/tollgate-bench
[ -x "$BENCH" ] || cargo build --release --quiet -p tollgate-bench
[ -x "$TG" ] || cargo build --release --quiet -p tollgate --bin tollgate
WORK=$(mktemp -d /tmp/tollgate-costs.XXXXXX)
PIDS=()
trap cleanup EXIT

grpc=$(free_port); http=$(free_port)
valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" "$TG" serve \
  --config examples/llm-gateway.yaml --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
  --serving-threads 1 --log error 2>"$WORK/valgrind.log" &
pid=$!; PIDS+=("$pid")
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
decisions=$("$BENCH" --addr "http://127.0.0.1:$grpc" --domain llm-gateway \
  --descriptor 'tenant_spend=t{key},model=gpt-4o,kind=input' --hits 1000 --keys 1000 \
  --concurrency 16 --connections 2 --threads 1 --warmup 0s --duration "${SECONDS_EACH}s" --json \
  2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["errors"] == 0, r; print(r["requests"])')
kill -INT "$pid"; wait "$pid" 2>/dev/null || true
callgrind_annotate --inclusive=yes "$WORK/cg.out" >"$WORK/annotated.txt" 2>/dev/null

python3 - "$WORK/annotated.txt" "$decisions" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$TG" <<'PY'
import re, sys
path, decisions, rev, tg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
line = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)  (\S.*)$")
totals, fns = None, {}
for l in open(path):
    m = line.match(l)
    if not m:
        continue
    n, name = int(m.group(1).replace(",", "")), m.group(2)
    if name.startswith("PROGRAM TOTALS"):
        totals = n
    elif ":" in name:
        # "file:function [object]", or a call line "=> file:function (Nx)".
        name = re.sub(r"^=> ", "", name)
        fn = re.sub(r" \([\d,]+x\)$", "", name.split(":", 1)[1].split(" [")[0])
        fns[fn] = max(fns.get(fn, 0), n)
def find(pattern):
    hits = [n for f, n in fns.items() if re.search(pattern, f)]
    return max(hits) if hits else None
price = find(r"tollgate::plan::price::cost$")
tracked = find(r"transport::Tracked<S> as hyper::service::service::Service<.*>>::call::\{\{closure\}\}$")
inner = find(r"grpc::Calls<S> as hyper::service::service::Service<.*>>::call::\{\{closure\}\}$")
print(f"{decisions:,} money charges under callgrind ({rev}, {tg}); instructions:")
print(f"  per decision, all of the process (idle included): {totals / decisions:,.0f}")
if price is not None:
    print(f"  price lookup (plan::price::cost) per charge:      {price / decisions:,.0f}")
if tracked is not None and inner is not None:
    print(f"  idle tracking's boxed future per call:            {(tracked - inner) / decisions:,.0f}"
          " (the rest of it, an Arc clone and three atomics, is inlined into hyper's code)")
PY
