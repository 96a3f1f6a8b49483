#!/usr/bin/env bash
# Scenario (c) of bench.sh — 3 descriptors, hierarchical + shared — with the shared limit plain
# and leased (`lease: 1000`, examples/bench.yaml's `ltenant` rule), alternating, on a single
# Redis and on a 3-primary cluster. Prints per run: decisions/s, per tollgate CPU-s, Redis µs
# per decision, Redis CPU seconds per primary, p99/p99.9, the share of charges of the leased
# limit answered from the lease, and the script calls that touched the shared key.
#
#   scripts/bench-lease.sh [ROUNDS] [DURATION]     # default 3 rounds of 5s
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ROUNDS=${1:-3}
DURATION=${2:-5s}
WORK=$(mktemp -d /tmp/tollgate-lease.XXXXXX)
PIDS=()
trap cleanup EXIT
need redis-server redis-cli python3 curl

build_bins

redis_cpu() { # per port: used_cpu_user+sys
  for p in "$@"; do
    redis-cli -p "$p" info cpu | awk -F: '/used_cpu_(user|sys):/{s+=$2} END{printf "%s ", s}'
  done
}

metric() { curl -s "http://127.0.0.1:$HTTP/metrics" | awk -v m="$1" '$1==m{print $2}'; }

one() { # name ports -- bench args
  local name=$1 ports=$2; shift 3
  $BENCH --addr "http://127.0.0.1:$GRPC" --domain bench --duration 2s --warmup 0s --json "$@" >/dev/null 2>&1
  local c0 r0 l0 t0 d0 json c1 r1 l1 t1 d1
  c0=$(cpu_s "$TG_PID"); r0=$(redis_cpu $ports)
  l0=$(metric tollgate_lease_local_charges_total); t0=$(metric tollgate_lease_takes_total)
  d0=$(metric 'tollgate_store_duration_seconds_count{op="decide"}')
  json=$($BENCH --addr "http://127.0.0.1:$GRPC" --domain bench --duration "$DURATION" --warmup 0s --json "$@" 2>/dev/null)
  c1=$(cpu_s "$TG_PID"); r1=$(redis_cpu $ports)
  l1=$(metric tollgate_lease_local_charges_total); t1=$(metric tollgate_lease_takes_total)
  d1=$(metric 'tollgate_store_duration_seconds_count{op="decide"}')
  python3 - "$name" "$c0" "$c1" "$r0" "$r1" "$l0" "$l1" "$t0" "$t1" "$d0" "$d1" "$json" <<'PY'
import json, sys
name, c0, c1, r0, r1, l0, l1, t0, t1, d0, d1, raw = sys.argv[1:]
d = json.loads(raw); n = d["requests"]; secs = n / d["decisions_per_sec"]
per = [b - a for a, b in zip(map(float, r0.split()), map(float, r1.split()))]
local = float(l1) - float(l0); takes = float(t1) - float(t0); calls = float(d1) - float(d0)
# Plain: every decision's shared group is one script call. Leased: the calls that took a
# lease, plus the charges neither local nor a take (decided exactly).
hot = n if name == "plain" else takes + (n - local - takes)
print(f"| {name} | {d['decisions_per_sec']:,.0f} | {n / (float(c1) - float(c0)):,.0f} | "
      f"{sum(per) / n * 1e6:.1f} | {' / '.join(f'{x:.2f}' for x in per)} | "
      f"{d['p99_us'] / 1000:.2f} | {d['p999_us'] / 1000:.2f} | {local / n:.3f} | "
      f"{hot / secs:,.0f} | {calls / n:.2f} | {d['errors']} |")
PY
}

series() { # store-name ports url
  local ports=$2
  GRPC=$(free_port); HTTP=$(free_port)
  $TG serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$GRPC" --http-addr "127.0.0.1:$HTTP" \
    --redis-url "$3" --log warn 2>"$WORK/$1.log" &
  TG_PID=$!; PIDS+=("$TG_PID")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$HTTP/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  echo
  echo "$1, $ROUNDS rounds of $DURATION:"
  echo
  echo "| shared limit | decisions/s | per tollgate CPU-s | Redis µs/decision | Redis CPU s per primary | p99 ms | p99.9 ms | leased charges from the lease | shared key calls/s | script calls/decision | errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for _ in $(seq "$ROUNDS"); do
    one plain "$ports" -- --descriptor 'tenant={key},model=gpt' --descriptor 'key={key}' --descriptor 'd0={key}' --keys 10000
    one leased "$ports" -- --descriptor 'ltenant={key},model=gpt' --descriptor 'key={key}' --descriptor 'd0={key}' --keys 10000
  done
  kill "$TG_PID"; wait "$TG_PID" 2>/dev/null || true
}

SINGLE=$(free_port); start_redis "$SINGLE"
series "single Redis" "$SINGLE" "redis://127.0.0.1:$SINGLE"

start_cluster
series "3-primary cluster" "${CLUSTER[*]}" "redis-cluster://127.0.0.1:${CLUSTER[0]}"
