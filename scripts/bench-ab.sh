#!/usr/bin/env bash
# Two tollgate builds side by side: scripts/bench.sh's scenario (a) (1 descriptor over 10,000
# keys, closed loop, every answer OK) on the in-memory store and on one Redis, the two builds
# alternating run by run so a noisy box hits both alike; prints a Markdown table of medians of
# decisions per server CPU-second (and decisions/s, p99), and new ÷ old.
#
#   scripts/bench-ab.sh OLD_TOLLGATE [NEW_TOLLGATE] [RUNS] [DURATION]
#     OLD_TOLLGATE: another build (e.g. `git worktree add /tmp/old <commit>` and
#     `cargo build --release` there); NEW_TOLLGATE defaults to target/release/tollgate; RUNS per
#     build and store (default 5), DURATION per run (default 8s).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

OLD=${1:?usage: scripts/bench-ab.sh OLD_TOLLGATE [NEW_TOLLGATE] [RUNS] [DURATION]}
NEW=${2:-target/release/tollgate}
RUNS=${3:-5}
DURATION=${4:-8s}
need redis-server redis-cli python3
for bin in "$OLD" "$NEW"; do
  [ -x "$bin" ] || { echo "error: $bin is not an executable tollgate" >&2; exit 1; }
done
BENCH=target/release/tollgate-bench
[ -x "$BENCH" ] || cargo build --release --quiet -p tollgate-bench
WORK=$(mktemp -d /tmp/tollgate-ab.XXXXXX)
PIDS=()
TG_ARGS=()
trap cleanup EXIT

REDIS=$(free_port)
start_redis "$REDIS"
REDIS_PID=${PIDS[-1]}

RESULTS=$WORK/results
for store in memory redis; do
  for run in $(seq 1 "$RUNS"); do
    for build in old new; do
      TG=$OLD; [ "$build" = new ] && TG=$NEW
      redis-cli -p "$REDIS" flushall >/dev/null
      start_rls tollgate "$store"
      args=(--addr "http://127.0.0.1:$PORT" --domain bench --descriptor 'key={key}' --keys 10000)
      $BENCH "${args[@]}" --duration 2s --warmup 0s --json >/dev/null 2>&1
      c0=$(cpu_s "$PID"); r0=$(cpu_s "$REDIS_PID")
      json=$($BENCH "${args[@]}" --duration "$DURATION" --warmup 0s --json 2>/dev/null)
      c1=$(cpu_s "$PID"); r1=$(cpu_s "$REDIS_PID")
      kill "$PID"; wait "$PID" 2>/dev/null || true
      echo "$store $build $c0 $c1 $r0 $r1 $json" >> "$RESULTS"
      echo "$store run $run $build done" >&2
    done
  done
done

python3 - "$RESULTS" "$RUNS" "$DURATION" "$OLD" "$NEW" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    store, build, c0, c1, r0, r1, raw = line.split(" ", 6)
    d = json.loads(raw)
    rows.setdefault((store, build), []).append({
        "dps": d["decisions_per_sec"], "per_cpu": d["requests"] / (float(c1) - float(c0)),
        "p99": d["p99_us"] / 1000, "bad": d["errors"],
    })
med = lambda runs, k: statistics.median(r[k] for r in runs)
print(f"Scenario (a), medians of {sys.argv[2]} alternating {sys.argv[3]} runs per build and "
      f"store; old = `{sys.argv[4]}`, new = `{sys.argv[5]}`.\n")
print("| store | build | decisions/s | per server CPU-s | p99 ms | errors | per CPU-s, each run |")
print("|---|---|---|---|---|---|---|")
for store in ("memory", "redis"):
    for build in ("old", "new"):
        runs = rows[(store, build)]
        each = " ".join(f"{r['per_cpu']:,.0f}" for r in runs)
        print(f"| {store} | {build} | {med(runs,'dps'):,.0f} | {med(runs,'per_cpu'):,.0f} | "
              f"{med(runs,'p99'):.2f} | {sum(r['bad'] for r in runs)} | {each} |")
    o, n = rows[(store, "old")], rows[(store, "new")]
    print(f"| {store} | **new ÷ old** | {med(n,'dps')/med(o,'dps'):.3f} | "
          f"**{med(n,'per_cpu')/med(o,'per_cpu'):.3f}** | | | |")
PY
