#!/usr/bin/env bash
# Instructions per decision, counted by valgrind's callgrind: the same count for the same
# binary and load whatever else the box is doing, so two builds can be told apart by less than
# the few percent a wall-clock benchmark on a shared 2-core box can resolve. Runs each tollgate
# build under callgrind on the memory store (one serving thread) twice: idle for SECONDS, and
# under scripts/bench.sh's scenario (a) load for SECONDS; prints
# (instructions under load − idle instructions) ÷ decisions. With STORE=redis each build runs
# on a Redis of its own (started here on a free port) instead: tollgate's own instructions per
# decision on the Redis path (Redis's CPU is scripts/script-cpu.py's).
#
#   [STORE=redis] scripts/bench-instructions.sh SECONDS TOLLGATE [TOLLGATE...]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

SECONDS_EACH=${1:?usage: scripts/bench-instructions.sh SECONDS TOLLGATE [TOLLGATE...]}
shift
[ $# -gt 0 ] || { echo "usage: scripts/bench-instructions.sh SECONDS TOLLGATE [TOLLGATE...]" >&2; exit 1; }
need valgrind python3 curl
[ "${STORE:-memory}" = redis ] && need redis-server redis-cli
BENCH=target/release/tollgate-bench
[ -x "$BENCH" ] || cargo build --release --quiet -p tollgate-bench
WORK=$(mktemp -d /tmp/tollgate-ir.XXXXXX)
PIDS=()
trap cleanup EXIT

# Runs $1 under callgrind for SECONDS_EACH, under load when $2 is "load"; prints "Ir decisions".
measure() {
  local bin=$1 load=$2 grpc http out pid decisions=0
  local store=() rport=
  grpc=$(free_port); http=$(free_port); out="$WORK/cg.$RANDOM"
  if [ "${STORE:-memory}" = redis ]; then
    local rport; rport=$(free_port); start_redis "$rport" >/dev/null 2>&1
    store=(--redis-url "redis://127.0.0.1:$rport")
  fi
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve \
    --config examples/bench.yaml --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
    --serving-threads 1 --log error "${store[@]}" 2>"$WORK/valgrind.log" &
  pid=$!; PIDS+=("$pid")
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  if [ "$load" = load ]; then
    decisions=$("$BENCH" --addr "http://127.0.0.1:$grpc" --domain bench --descriptor 'key={key}' \
      --keys 10000 --concurrency 16 --connections 2 --threads 1 --warmup 0s \
      --duration "${SECONDS_EACH}s" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])')
  else
    sleep "$SECONDS_EACH"
  fi
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  # Started in this $(...)'s subshell, the Redis is not in the caller's PIDS: stop it here.
  [ -z "${rport:-}" ] || redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
  python3 - "$out" "$decisions" <<'PY'
import sys
ir = 0
for line in open(sys.argv[1]):
    if line.startswith("summary:") or line.startswith("totals:"):
        ir = max(ir, int(line.split()[1]))
print(ir, sys.argv[2])
PY
}

echo "| build | decisions | instructions per decision |"
echo "|---|---|---|"
for bin in "$@"; do
  read -r idle _ <<<"$(measure "$bin" idle)"
  read -r busy n <<<"$(measure "$bin" load)"
  python3 -c "import sys; b, i, n = map(int, sys.argv[2:]); print(f'| \`{sys.argv[1]}\` | {n:,} | {(b - i) / n:,.0f} |')" \
    "$bin" "$busy" "$idle" "$n"
done
