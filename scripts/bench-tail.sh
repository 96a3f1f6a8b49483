#!/usr/bin/env bash
# The closed-loop tail (64 in flight, scenario (a) of bench.sh) by who gets the cores: tollgate's
# serving threads (`--serving-threads` 1 or 2) against the load generator's threads (`--threads`
# 0 = one per core, or 1), on the memory store and a single Redis, rounds alternating. Prints
# one line per run: decisions/s, per tollgate CPU-s, p50/p99/p99.9/max, and the longest event
# Redis's own latency monitor saw (ms; what Redis itself spent, not its wait for a core).
#
#   scripts/bench-tail.sh [ROUNDS] [DURATION]     # default 3 rounds of 5s
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ROUNDS=${1:-3}
DURATION=${2:-5s}
WORK=$(mktemp -d /tmp/tollgate-tail.XXXXXX)
PIDS=()
trap cleanup EXIT
need redis-server redis-cli python3 curl

build_bins

# one STORE SERVING_THREADS GENERATOR_THREADS
one() {
  local store=$1 st=$2 gt=$3 port http redis=() rport="" pid c0 c1 json lat=0
  port=$(free_port); http=$(free_port)
  if [ "$store" = redis ]; then
    rport=$(free_port); start_redis "$rport" --latency-monitor-threshold 1
    redis=(--redis-url "redis://127.0.0.1:$rport")
  fi
  $TG serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$port" \
    --http-addr "127.0.0.1:$http" --log warn --serving-threads "$st" "${redis[@]}" \
    2>"$WORK/tollgate.log" &
  pid=$!; PIDS+=("$pid")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  local args=(--addr "http://127.0.0.1:$port" --domain bench --descriptor 'key={key}' --keys 10000
    --threads "$gt" --warmup 0s --json)
  $BENCH "${args[@]}" --duration 2s >/dev/null 2>&1
  c0=$(cpu_s "$pid")
  json=$($BENCH "${args[@]}" --duration "$DURATION" 2>/dev/null)
  c1=$(cpu_s "$pid")
  if [ -n "$rport" ]; then
    lat=$(redis-cli -p "$rport" latency latest | awk 'NR % 4 == 0 && $1 > m {m = $1} END {print m + 0}')
  fi
  kill "$pid"
  [ -n "$rport" ] && redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  PIDS=() # both stopped: cleanup must not signal their (reusable) process ids
  python3 - "$store" "$st" "$gt" "$c0" "$c1" "$lat" "$json" <<'PY'
import json, sys
store, st, gt, c0, c1, lat, raw = sys.argv[1:]
d = json.loads(raw)
cpu = float(c1) - float(c0)
print(f"| {store} | {st} | {gt} | {d['decisions_per_sec']:,.0f} | {d['requests'] / cpu:,.0f} | "
      f"{d['p50_us']/1000:.2f} | {d['p99_us']/1000:.2f} | {d['p999_us']/1000:.2f} | "
      f"{d['max_us']/1000:.2f} | {lat} | {d['errors']} |")
PY
}

echo "| store | serving threads | generator threads | decisions/s | per tollgate CPU-s | p50 ms | p99 ms | p99.9 ms | max ms | Redis's longest event ms | errors |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for _ in $(seq "$ROUNDS"); do
  for store in memory redis; do
    for st in 2 1; do
      for gt in 0 1; do one "$store" "$st" "$gt"; done
    done
  done
done
