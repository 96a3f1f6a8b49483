#!/usr/bin/env bash
# Side by side: tollgate and another RLS server (limitador) under the same load generator, on
# the in-memory store and on one Redis, alternating run by run; prints a Markdown table of
# medians.
#
#   LIMITADOR_BIN=/path/to/limitador-server scripts/bench-compare.sh [RUNS] [DURATION]
#
# RUNS per server and store (default 3), DURATION per run (default 5s). limitador is not on
# crates.io and is not built here: point LIMITADOR_BIN at a limitador-server you built from its
# repository. Its limits are examples/limitador-bench.yaml (the same limits as
# examples/bench.yaml's `key` rule); on memory it runs with `--cache 100000` (issue 13's
# command; without it limitador sizes its cache to 70% of free memory). Scenario (a):
# 1 descriptor over 10,000 keys, closed loop, 64 in flight over 4 connections, all allowed.
# *per CPU-s* = decisions / CPU seconds of the server process (user + system); *Redis
# µs/decision* = Redis CPU per decision.
# TOLLGATE_BENCH_THREADS=1 runs the load generator on one thread (tollgate-bench reads it;
# unset: one per core); TOLLGATE_BENCH_BIN runs another tollgate-bench binary; TOLLGATE_ARGS
# adds arguments to `tollgate serve` (e.g. "--serving-threads 1"); TOLLGATE_PROFILE=dist measures
# the container image's build (scripts/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

RUNS=${1:-3}
DURATION=${2:-5s}
LIMITADOR=${LIMITADOR_BIN:?set LIMITADOR_BIN to a limitador-server binary}
WORK=$(mktemp -d /tmp/tollgate-compare.XXXXXX)
PIDS=()
trap cleanup EXIT

need redis-server redis-cli python3 curl
[ -x "$LIMITADOR" ] || { echo "error: LIMITADOR_BIN=$LIMITADOR is not executable" >&2; exit 1; }

build_bins
read -r -a TG_ARGS <<< "${TOLLGATE_ARGS:-}"
BENCH=${TOLLGATE_BENCH_BIN:-$BENCH}

REDIS=$(free_port)
redis-server --port "$REDIS" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
  --logfile "$WORK/redis.log" &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for _ in $(seq 100); do redis-cli -p "$REDIS" ping >/dev/null 2>&1 && break; sleep 0.05; done

RESULTS=$WORK/results
for store in memory redis; do
  for run in $(seq 1 "$RUNS"); do
    for server in tollgate limitador; do
      redis-cli -p "$REDIS" flushall >/dev/null
      start_rls "$server" "$store"
      args=(--addr "http://127.0.0.1:$PORT" --domain bench --descriptor 'key={key}' --keys 10000)
      $BENCH "${args[@]}" --duration 2s --warmup 0s --json >/dev/null 2>&1
      c0=$(cpu_s "$PID"); r0=$(cpu_s "$REDIS_PID")
      json=$($BENCH "${args[@]}" --duration "$DURATION" --warmup 0s --json 2>/dev/null)
      c1=$(cpu_s "$PID"); r1=$(cpu_s "$REDIS_PID")
      kill "$PID"; wait "$PID" 2>/dev/null || true
      echo "$store $server $c0 $c1 $r0 $r1 $json" >> "$RESULTS"
      echo "$store run $run $server done" >&2
    done
  done
done

python3 - "$RESULTS" "$RUNS" "$DURATION" "${TOLLGATE_BENCH_THREADS:-0}" "${TOLLGATE_ARGS:-}" "$PROFILE" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    store, server, c0, c1, r0, r1, raw = line.split(" ", 6)
    d = json.loads(raw)
    cpu = float(c1) - float(c0)
    rows.setdefault((store, server), []).append({
        "dps": d["decisions_per_sec"], "per_cpu": d["requests"] / cpu,
        "redis_us": (float(r1) - float(r0)) * 1e6 / max(d["requests"], 1),
        "p99": d["p99_us"] / 1000, "p999": d["p999_us"] / 1000,
        "bad": d["errors"],
    })
med = lambda runs, k: statistics.median(r[k] for r in runs)
extra = f"; tollgate with `{sys.argv[5]}`" if sys.argv[5] else ""
extra += f"; tollgate's `{sys.argv[6]}` build"
print(f"Medians of {sys.argv[2]} alternating {sys.argv[3]} runs per server and store; the load "
      f"generator on `--threads {sys.argv[4]}`{extra}.\n")
print("| store | server | decisions/s | per server CPU-s | p99 ms | p99.9 ms | Redis µs/decision | errors | per CPU-s, each run |")
print("|---|---|---|---|---|---|---|---|---|")
for store in ("memory", "redis"):
    for server in ("tollgate", "limitador"):
        runs = rows.get((store, server), [])
        if not runs:
            continue
        each = " ".join(f"{r['per_cpu']:,.0f}" for r in runs)
        print(f"| {store} | {server} | {med(runs,'dps'):,.0f} | {med(runs,'per_cpu'):,.0f} | "
              f"{med(runs,'p99'):.2f} | {med(runs,'p999'):.2f} | "
              f"{med(runs,'redis_us') if store == 'redis' else 0:.1f} | {sum(r['bad'] for r in runs)} | {each} |")
    t, l = rows.get((store, "tollgate")), rows.get((store, "limitador"))
    if t and l:
        print(f"| {store} | **tollgate ÷ limitador** | {med(t,'dps')/med(l,'dps'):.2f}× | "
              f"**{med(t,'per_cpu')/med(l,'per_cpu'):.2f}×** | | | | | |")
PY
