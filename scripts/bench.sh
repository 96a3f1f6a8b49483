#!/usr/bin/env bash
# Benchmarks tollgate on the in-memory store, a single Redis and a 3-primary Redis Cluster, all
# on this machine, and writes the results to BENCHMARKS.md.
#
#   scripts/bench.sh [DURATION]      # DURATION per scenario, default 10s
#   LIMITADOR_BIN=/path/to/limitador-server scripts/bench.sh 5s   # and limitador side by side
#
# Starts everything it needs on free loopback ports (redis-server processes, tollgate servers)
# and stops them on exit. Besides decisions/s it records the tollgate process's CPU seconds, so
# "decisions per tollgate CPU-second" survives a noisy machine, and Redis CPU per decision,
# compared with redis-cli --pipe running the same script directly (the ceiling).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

DURATION=${1:-10s}
WARMUP=2s
OUT=BENCHMARKS.md
WORK=$(mktemp -d /tmp/tollgate-bench.XXXXXX)
PIDS=()

trap cleanup EXIT

need redis-server redis-cli redis-benchmark python3

build_bins


echo "starting redis single node and a 3-primary cluster..." >&2
SINGLE=$(free_port); start_redis "$SINGLE"
start_cluster

start_tollgate() { # name [serve args...]: sets TG_PID and TG_PORT
  local name=$1; shift
  TG_PORT=$(free_port); local http; http=$(free_port)
  $TG serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$TG_PORT" --http-addr "127.0.0.1:$http" \
    --log warn "$@" 2>"$WORK/$name.log" &
  TG_PID=$!; PIDS+=("$TG_PID")
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && return 0; sleep 0.1
  done
  echo "tollgate ($name) did not become ready; log:" >&2; cat "$WORK/$name.log" >&2; exit 1
}

ROWS=()
# run STORE SCENARIO REDIS_PORTS -- bench args...
run() {
  local store=$1 scenario=$2 ports=$3; shift 4
  local c0 r0 c1 r1 json
  # Warm up in a separate run, so the CPU measured below covers exactly the counted decisions.
  $BENCH --addr "http://127.0.0.1:$TG_PORT" --domain bench --duration "$WARMUP" --warmup 0s \
    --json "$@" >/dev/null 2>&1
  c0=$(cpu_s "$TG_PID"); r0=0; [ -n "$ports" ] && r0=$(redis_cpu $ports)
  json=$($BENCH --addr "http://127.0.0.1:$TG_PORT" --domain bench --duration "$DURATION" \
    --warmup 0s --json "$@" 2>/dev/null)
  c1=$(cpu_s "$TG_PID"); r1=0; [ -n "$ports" ] && r1=$(redis_cpu $ports)
  ROWS+=("$(python3 - "$store" "$scenario" "$c0" "$c1" "$r0" "$r1" "$json" "$*" <<'PY'
import json, sys
store, scen, c0, c1, r0, r1, raw, args = sys.argv[1:]
d = json.loads(raw)
reqs = d.get("requests", 0)
cpu = float(c1) - float(c0)
rcpu = float(r1) - float(r0)
per_cpu = reqs / cpu if cpu > 0 else 0
redis_us = (rcpu / reqs * 1e6) if reqs and rcpu > 0 else 0
print(f"| {store} | {scen} | {d['decisions_per_sec']:,.0f} | {per_cpu:,.0f} | "
      f"{d['ok']:,} / {d['over_limit']:,} / {d['errors']:,} | "
      f"{d['p50_us']/1000:.3f} | {d['p90_us']/1000:.3f} | {d['p99_us']/1000:.3f} | "
      f"{d['p999_us']/1000:.3f} | {d['max_us']/1000:.3f} | "
      f"{redis_us:.1f} |")
PY
)")
  echo "${ROWS[-1]}" >&2
}

scenarios() { # store redis_ports
  local s=$1 p=$2
  run "$s" "(a) 1 descriptor, 10,000 keys" "$p" -- --descriptor 'key={key}' --keys 10000
  run "$s" "(b) 1 hot key" "$p" -- --descriptor 'key=hot'
  run "$s" "(c) 3 descriptors, hierarchical + shared" "$p" -- \
    --descriptor 'tenant={key},model=gpt' --descriptor 'key={key}' --descriptor 'd0={key}' --keys 10000
  run "$s" "(c) with lease: 1000 on the shared limit" "$p" -- \
    --descriptor 'ltenant={key},model=gpt' --descriptor 'key={key}' --descriptor 'd0={key}' --keys 10000
  run "$s" "(d) 1 key far over its limit" "$p" -- --descriptor 'deny=x'
  run "$s" "(e) open loop 2,000/s" "$p" -- --descriptor 'key={key}' --keys 10000 --rate 2000
  run "$s" "3 descriptors" "$p" -- --descriptor 'd0={key}' --descriptor 'd1={key}' \
    --descriptor 'd2={key}' --keys 10000
  run "$s" "10 descriptors" "$p" -- $(for i in $(seq 0 9); do printf -- "--descriptor d$i={key} "; done) --keys 10000
  run "$s" "(f) token bucket, 10,000 keys" "$p" -- --descriptor 'tb={key}' --keys 10000
  run "$s" "(g) sliding window (a minute), 10,000 keys" "$p" -- --descriptor 'sw={key}' --keys 10000
  run "$s" "(h) sliding window (a minute), 1 hot key" "$p" -- --descriptor 'sw=hot'
}

# The transport's floor: `serve --disabled` answers every request OK without a store, so its
# decisions per CPU-second are what gRPC alone costs (issue 62 compares the stores with it).
echo "the floor: serve --disabled..." >&2
start_tollgate disabled --disabled
run "none (\`--disabled\`)" "(a) 1 descriptor, 10,000 keys" "" -- --descriptor 'key={key}' --keys 10000
kill "$TG_PID"

echo "memory store..." >&2
start_tollgate memory
scenarios memory ""
kill "$TG_PID"

echo "redis single node..." >&2
start_tollgate redis --redis-url "redis://127.0.0.1:$SINGLE" --redis-timeout 100ms
scenarios redis "$SINGLE"
# Memory per live key: 5-second fixed windows over 100,000 keys; fill, measure, let expire.
redis-cli -p "$SINGLE" flushall >/dev/null; sleep 1
m0=$(redis-cli -p "$SINGLE" info memory | awk -F: '/^used_memory:/{print $2+0}')
$BENCH --addr "http://127.0.0.1:$TG_PORT" --domain bench --descriptor 'mem={key}' --keys 100000 \
  --duration 3s --warmup 0s --json >/dev/null 2>&1
keys=$(redis-cli -p "$SINGLE" dbsize)
m1=$(redis-cli -p "$SINGLE" info memory | awk -F: '/^used_memory:/{print $2+0}')
SAMPLE_KEY=$(redis-cli -p "$SINGLE" randomkey || true)
USAGE=$(for _ in $(seq 200); do redis-cli -p "$SINGLE" memory usage "$(redis-cli -p "$SINGLE" randomkey)"; done \
  | awk '{s+=$1; n++} END {if (n) printf "%.0f", s/n}')
sleep 7
keys_after=$(redis-cli -p "$SINGLE" dbsize)
BYTES_PER_KEY=$(( (m1 - m0) / (keys > 0 ? keys : 1) ))
kill "$TG_PID"

echo "redis cluster..." >&2
start_tollgate cluster --redis-url "redis-cluster://127.0.0.1:${CLUSTER[0]}" --redis-timeout 100ms
scenarios cluster "${CLUSTER[*]}"
# Tenants below a constant first entry: how the work spreads over the primaries.
SHARD_ROWS=()
declare -A SHARD_CPU0
for p in "${CLUSTER[@]}"; do SHARD_CPU0[$p]=$(redis_cpu "$p"); done
SHARD_JSON=$($BENCH --addr "http://127.0.0.1:$TG_PORT" --domain bench \
  --descriptor 'tier=free,tenant={key},model=gpt' --keys 10000 --duration "$DURATION" \
  --warmup 0s --json 2>/dev/null)
for p in "${CLUSTER[@]}"; do
  SHARD_ROWS+=("| $p | $(python3 -c "print(f'{$(redis_cpu "$p") - ${SHARD_CPU0[$p]}:.2f}')") |")
done
SHARD_DPS=$(python3 -c "import json,sys; print(f\"{json.loads(sys.argv[1])['decisions_per_sec']:,.0f}\")" "$SHARD_JSON")
kill "$TG_PID"

echo "redis-cli --pipe running tollgate.lua directly..." >&2
SHA=$(redis-cli -p "$SINGLE" script load "$(cat target/release/tollgate.lua)")
# The script's numbers are packed doubles (binary), which redis-benchmark cannot send: the
# calls are written out as RESP by python3 and sent by `redis-cli --pipe` (one connection,
# everything pipelined). PER calls to a script run (1: plain calls; more: a batch). ALG: 0 fixed
# window (4e9 a minute), 1 sliding window (4e9 a minute), 2 token bucket (1e6 a second, burst
# 4e6), over KEYS keys; FILL > 0 first gives every key a sliding window of FILL live granules.
pipe() { # name port calls per_script alg keys [fill]
  local name=$1 port=$2 calls=$3 per=$4 alg=$5 nkeys=$6 fill=${7:-0}
  redis-cli -p "$port" flushall >/dev/null
  if [ "$fill" -gt 0 ]; then
    for k in $(seq 0 $((nkeys - 1))); do
      # v3 sliding window state: <total, head> then <time, cost> per granule (60 ms for a minute).
      redis-cli -p "$port" eval "local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) local n = tonumber(ARGV[1]) local p = {}
        for i = 1, n do p[i] = struct.pack('<dd', now - 60000000 + i * 60000, 1) end
        redis.call('SET', KEYS[1], struct.pack('<dd', n, 16) .. table.concat(p), 'PX', 120000)" \
        1 "tg:v3:{bench|a=$k}|x" "$fill" >/dev/null
    done
  fi
  python3 - "$SHA" "$calls" "$per" "$alg" "$nkeys" > "$WORK/pipe.resp" <<'PY'
import random, struct, sys
sha, calls, per, alg, nkeys = sys.argv[1], *map(int, sys.argv[2:])
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
limit, window, burst = [(4e9, 60e6, 4e9), (4e9, 60e6, 4e9), (1e6, 1e6, 4e6)][alg]
# Redis TIME (-1), 1 key, decide (0), no quota descriptors, 1 charge, no request id (two
# numbers), no reservation record; then the charge: key 1, the algorithm, limit, window,
# burst, no overdraft, cost 1, enforced
packed = struct.pack("<16d", -1, 1, 0, 0, 1, 0, 0, 0, 1, alg, limit, window, burst, 0, 1, 0)
out = sys.stdout.buffer
for _ in range(calls // per):
    keys = [b"tg:v3:{bench|a=%d}|x" % random.randrange(nkeys) for _ in range(per)]
    parts = [b"EVALSHA", sha.encode(), str(len(keys)).encode()] + keys + [packed] * per
    out.write(b"*%d\r\n" % len(parts) + b"".join(bulk(p) for p in parts))
PY
  local r0 r1 t0 t1
  r0=$(redis_cpu "$port"); t0=$(date +%s.%N)
  redis-cli -p "$port" --pipe < "$WORK/pipe.resp" > "$WORK/pipe.out" 2>&1
  t1=$(date +%s.%N); r1=$(redis_cpu "$port")
  grep -q 'errors: 0' "$WORK/pipe.out" || { echo "redis-cli --pipe failed: $(cat "$WORK/pipe.out")" >&2; exit 1; }
  python3 -c "print(f'| $name | {$calls/($t1-$t0):,.0f} | {($r1-$r0)/$calls*1e6:.1f} |')"
}
CEILING=(
  "$(pipe "fixed window, 1 call per script" "$SINGLE" 200000 1 0 10000)"
  "$(pipe "fixed window, batches of 16 calls" "$SINGLE" 200000 16 0 10000)"
  "$(pipe "sliding window, batches of 16 calls" "$SINGLE" 200000 16 1 10000)"
  "$(pipe "token bucket, batches of 16 calls" "$SINGLE" 200000 16 2 10000)"
  "$(pipe "sliding window, 1 key holding 1,000 granules, batches of 16" "$SINGLE" 20000 16 1 1 1000)"
)
if [ -n "${LIMITADOR_BIN:-}" ]; then
  echo "side by side with limitador..." >&2
  COMPARE=$(bash scripts/bench-compare.sh 3 "$DURATION")
fi
RBINCR=$(redis-benchmark -p "$SINGLE" -n 200000 -c 50 -r 10000 -q INCR 'k:__rand_int__' 2>/dev/null | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | awk '{print $1}')

{
  echo "# Benchmarks"
  echo
  echo "Measured by \`TOLLGATE_PROFILE=$PROFILE scripts/bench.sh $DURATION\` on $(date -u +%Y-%m-%d): $(nproc) cores,"
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load generator"
  echo "(\`tollgate-bench\`), tollgate and Redis all on this one machine. Redis $(redis-server --version | awk '{print $3}' | cut -d= -f2)."
  echo
  echo "Closed loop, 64 in flight over 4 connections, unless the scenario says open loop."
  echo "*per tollgate CPU-s* = decisions / CPU seconds the tollgate process used (user + system);"
  echo "*Redis µs/decision* = Redis CPU (all primaries) per decision."
  echo
  echo "| store | scenario | decisions/s | per tollgate CPU-s | OK / OVER / errors | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | Redis µs/decision |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "## The ceiling: the same script run directly (redis-cli --pipe, one connection)"
  echo
  echo "\`EVALSHA tollgate.lua\`, one enforced charge per call, 10,000 keys unless the row says"
  echo "otherwise."
  echo
  echo "| calls | calls/s | Redis µs/call |"
  echo "|---|---|---|"
  printf '%s\n' "${CEILING[@]}"
  echo "| INCR (for scale; redis-benchmark, 50 clients) | ${RBINCR:-?} | |"
  echo
  echo "## Hot shards: tenants below a constant first entry"
  echo
  echo "\`tier=free,tenant={10,000 values},model=gpt\` (examples/bench.yaml's \`tier\` rule) on the"
  echo "3-primary cluster for $DURATION: $SHARD_DPS decisions/s. Redis CPU seconds per primary:"
  echo
  echo "| primary | Redis CPU s |"
  echo "|---|---|"
  printf '%s\n' "${SHARD_ROWS[@]}"
  echo
  if [ -n "${LIMITADOR_BIN:-}" ]; then
    echo "## Side by side with limitador"
    echo
    echo "\`LIMITADOR_BIN=… scripts/bench-compare.sh 3 $DURATION\` (limitador built from its repository;"
    echo "the same load generator, scenario (a), servers alternating):"
    echo
    echo "$COMPARE"
    echo
  fi
  echo "## Redis memory"
  echo
  echo "$keys live fixed-window keys (5-second windows, 100,000 values) took $((m1 - m0)) bytes of"
  echo "used_memory: **$BYTES_PER_KEY bytes per key**, including Redis's per-key overhead and the"
  echo "expiry entry; MEMORY USAGE averages $USAGE bytes over 200 random keys. A key looks like"
  echo "\`$SAMPLE_KEY\` (its value: two packed doubles, 16 bytes). Seven seconds later (windows"
  echo "expired) DBSIZE was $keys_after."
} > "$OUT"
echo "wrote $OUT" >&2
