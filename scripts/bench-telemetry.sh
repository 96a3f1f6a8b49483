#!/usr/bin/env bash
# What telemetry costs: decisions per tollgate CPU-second on the memory store, scenario (a)
# of scripts/bench.sh, for three builds/settings run in alternation (single runs on a 2-core box
# vary by ±15%, so the medians of ROUNDS alternating runs are compared):
#   before   - BEFORE_BIN, a build from before the prometheus-client metrics (optional)
#   nostats  - this build without envoyproxy/ratelimit's statistics (--disable-stats), tracing off
#   metrics  - this build, tracing off (OTEL_* unset: no tracer is created), statistics on (the
#              default); metrics vs nostats is what the statistics cost per decision
#   tracing  - this build, OTLP tracing on at 1% sampling (parentbased_traceidratio 0.01)
#
#   scripts/bench-telemetry.sh [ROUNDS] [BEFORE_BIN] [AFTER_BIN]
#       default 5 rounds, no "before"; AFTER_BIN (default this build) runs "metrics"; "tracing"
#       always runs this build
#
# The OTLP endpoint is a closed local port: spans are created, sampled and batched as in
# production, and the exporter's failed sends (every 5 s) are part of the cost.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ROUNDS=${1:-5}
BEFORE=${2:-}
AFTER=${3:-}
DURATION=5s
WORK=$(mktemp -d /tmp/tollgate-telemetry.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

build_bins

# one NAME BIN [ENV...]: prints decisions per tollgate CPU-second of one run
one() {
  local name=$1 bin=$2; shift 2
  local grpc http pid c0 c1 json
  grpc=$(free_port); http=$(free_port)
  env -i PATH="$PATH" "$@" "$bin" serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$grpc" \
    --http-addr "127.0.0.1:$http" --log error 2>"$WORK/$name.log" &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  $BENCH --addr "http://127.0.0.1:$grpc" --domain bench --descriptor 'key={key}' --keys 10000 \
    --duration 1s --warmup 0s --json >/dev/null 2>&1
  c0=$(cpu_s "$pid")
  json=$($BENCH --addr "http://127.0.0.1:$grpc" --domain bench --descriptor 'key={key}' --keys 10000 \
    --duration "$DURATION" --warmup 0s --json 2>/dev/null)
  c1=$(cpu_s "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(round(d['requests']/($c1-$c0)))" "$json"
}

closed=$(free_port)
declare -A RESULTS
for r in $(seq 1 "$ROUNDS"); do
  if [ -n "$BEFORE" ]; then RESULTS[before]+="$(one before "$BEFORE") "; fi
  RESULTS[nostats]+="$(one nostats "$TG" TOLLGATE_DISABLE_STATS=true) "
  RESULTS[metrics]+="$(one metrics "${AFTER:-$TG}") "
  RESULTS[tracing]+="$(one tracing "$TG" OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$closed" \
    OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.01) "
  echo "round $r/$ROUNDS: ${RESULTS[*]}" >&2
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| build / setting | decisions per tollgate CPU-s, $ROUNDS alternating runs | median |"
echo "|---|---|---|"
for k in before nostats metrics tracing; do
  [ -n "${RESULTS[$k]:-}" ] || continue
  echo "| $k | ${RESULTS[$k]} | $(echo "${RESULTS[$k]}" | median) |"
done
