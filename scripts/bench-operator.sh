#!/usr/bin/env bash
# What the operator's bookkeeping costs a decision (issue 36): the store-latency window on
# every decision, and the who-is-limited sketches on every OVER_LIMIT answer. Runs two tollgate
# binaries in alternating rounds on the memory store (one serving thread, the load generator on
# one thread, 1000 keys uniformly), first a flood where every answer is OVER_LIMIT (every key
# misses the sketches: their worst case), then one where every answer is OK. Prints per run
# decisions/s and the server's CPU µs per decision.
#
#   scripts/bench-operator.sh OLD_TOLLGATE [NEW_TOLLGATE] [ROUNDS]
#     OLD_TOLLGATE: a build without it (e.g. `git worktree add /tmp/old 2adb841` and
#     `cargo build --release` there); NEW_TOLLGATE defaults to target/release/tollgate.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

OLD=${1:?usage: scripts/bench-operator.sh OLD_TOLLGATE [NEW_TOLLGATE] [ROUNDS]}
NEW=${2:-target/release/tollgate}
ROUNDS=${3:-3}
BENCH=target/release/tollgate-bench
[ -x "$BENCH" ] || cargo build --release -p tollgate-bench
WORK=$(mktemp -d /tmp/tollgate-operator.XXXXXX)
PIDS=()
trap cleanup EXIT

run() { # BIN LABEL LIMIT
  printf 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: %s}\n' "$3" >"$WORK/c.yaml"
  local g h pid c0 c1 out
  g=$(free_port); h=$(free_port)
  "$1" serve --config "$WORK/c.yaml" --grpc-addr "127.0.0.1:$g" --http-addr "127.0.0.1:$h" \
    --serving-threads 1 >/dev/null 2>&1 &
  pid=$!; PIDS+=("$pid"); sleep 0.5
  "$BENCH" --addr "http://127.0.0.1:$g" --domain edge --descriptor 'remote_address={key}' \
    --keys 1000 --duration 2s --warmup 1s --threads 1 >/dev/null 2>&1
  c0=$(cpu_s "$pid")
  out=$("$BENCH" --addr "http://127.0.0.1:$g" --domain edge --descriptor 'remote_address={key}' \
    --keys 1000 --duration 8s --warmup 0s --threads 1 --json 2>/dev/null)
  c1=$(cpu_s "$pid")
  python3 - "$2" "$c0" "$c1" "$out" <<'PY'
import json, sys
label, c0, c1, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
n = out["decisions"]
print(f"{label}: {out['decisions_per_sec']:.0f}/s, {out['over_limit']} OVER_LIMIT, "
      f"server CPU {1e6 * (c1 - c0) / max(n, 1):.2f} µs/decision")
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

for flood in over ok; do
  limit=1; [ "$flood" = ok ] && limit=1000000000
  echo "== every answer ${flood^^}"
  for _ in $(seq "$ROUNDS"); do
    run "$OLD" "before" "$limit"
    run "$NEW" "after " "$limit"
  done
done
