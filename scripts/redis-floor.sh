#!/usr/bin/env bash
# Redis alone on this box, at the benchmark's concurrency: how fast and how long-tailed one
# script call per request is with no tollgate in front. redis-benchmark (C, one thread) keeps
# CLIENTS connections with one call in flight each (a closed loop of CLIENTS) running a
# fixed-window Lua script (INCRBY, PEXPIRE on the first charge) over 10,000 keys: first against
# a single node, then against a 3-primary cluster (redis-benchmark --cluster spreads the
# connections over the primaries). The script is lighter than the decision script (lua/decide/), so the tail it
# shows is a floor for any server that makes one Redis call per decision here.
#
#   scripts/redis-floor.sh [REQUESTS] [CLIENTS]   (defaults: 300000 64; prints a Markdown table)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
need redis-server redis-cli redis-benchmark python3
REQUESTS=${1:-300000}
CLIENTS=${2:-64}
WORK=$(mktemp -d)
PIDS=()
trap cleanup EXIT

SCRIPT="local v = redis.call('INCRBY', KEYS[1], 1) if v == 1 then redis.call('PEXPIRE', KEYS[1], 60000) end return v"

# One run: redis-benchmark's percentile distribution and summary, as a table row.
run() { # name port [--cluster] key
  local name=$1 port=$2; shift 2
  local key=${*: -1} extra=("${@:1:$#-1}")
  local r0 r1
  r0=$(redis_cpu_all "$port" "${extra[@]}")
  redis-benchmark -p "$port" "${extra[@]}" -c "$CLIENTS" -n "$REQUESTS" -r 10000 --precision 3 \
    eval "$SCRIPT" 1 "$key" > "$WORK/out" 2>&1
  r1=$(redis_cpu_all "$port" "${extra[@]}")
  python3 - "$name" "$REQUESTS" "$r0" "$r1" "$WORK/out" <<'PY'
import re, sys
name, n, r0, r1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
text = open(sys.argv[5]).read().replace("\r", "\n")
dist = [(float(p), float(ms)) for p, ms in
        re.findall(r"^([\d.]+)% <= ([\d.]+) milliseconds \(cumulative", text.split("Cumulative distribution")[0], re.M)]
if not dist:
    sys.exit("redis-benchmark printed no latency distribution:\n" + text[-2000:])
def at(q):  # the first bucket at or past percentile q
    return next(ms for p, ms in dist if p >= q)
rps = float(re.search(r"throughput summary: ([\d.]+)", text).group(1))
print(f"| {name} | {rps:,.0f} | {at(50):.3f} | {at(99):.3f} | {at(99.9):.3f} | {dist[-1][1]:.3f} | {(r1 - r0) / n * 1e6:.1f} |")
PY
}

# CPU seconds used so far by the Redis on port $1, or (with --cluster) by every primary.
redis_cpu_all() {
  local port=$1
  if [ "${2:-}" = --cluster ]; then
    local total=0 p
    for p in "${CLUSTER[@]}"; do total=$(python3 -c "print($total + $(one_cpu "$p"))"); done
    echo "$total"
  else
    one_cpu "$port"
  fi
}
one_cpu() {
  redis-cli -p "$1" info cpu | python3 -c "import sys; d = dict(l.strip().split(':', 1) for l in sys.stdin if ':' in l); print(float(d['used_cpu_sys']) + float(d['used_cpu_user']))"
}

SINGLE=$(free_port)
start_redis "$SINGLE"
start_cluster

echo "Closed loop of $CLIENTS (redis-benchmark, one call in flight per connection), $REQUESTS calls,"
echo "fixed-window Lua script over 10,000 keys, nothing else running:"
echo
echo "| Redis | calls/s | p50 ms | p99 ms | p99.9 ms | max ms | Redis µs/call |"
echo "|---|---|---|---|---|---|---|"
run "single node" "$SINGLE" "tg:{t__rand_int__}|x"
# --cluster: the key must hold the literal {tag}, which redis-benchmark replaces by a tag of
# the connection's node.
run "3-primary cluster" "${CLUSTER[0]}" --cluster "tg:{tag}:t__rand_int__|x"
