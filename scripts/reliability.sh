#!/usr/bin/env bash
# Runs the fault tests (real redis-server processes: a single node, a 3 + 3 cluster, a Sentinel
# trio; tollgate
# in-process; real gRPC) one at a time and writes what they measured to RELIABILITY.md.
#
#   scripts/reliability.sh [RUNS]     # RUNS repetitions of the whole matrix, default 1
#
# Each line of the table is one measurement a test printed; a test that fails stops the script
# (the table is only written from a passing run).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${1:-1}
OUT=RELIABILITY.md
LOG=$(mktemp /tmp/tollgate-reliability.XXXXXX)
trap 'rm -f "$LOG"' EXIT

for bin in redis-server redis-cli; do
  command -v "$bin" >/dev/null || { echo "error: $bin not on PATH" >&2; exit 1; }
done

for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS: cargo test --release --test faults -- --nocapture --test-threads 1" >&2
  cargo test --release --quiet --test faults -- --nocapture --test-threads 1 2>&1 | tee -a "$LOG" >&2
done

# The soak section (scripts/soak.sh's output, pasted by hand) survives a rewrite.
SOAK=$( [ -f "$OUT" ] && sed -n '/^## Soak/,$p' "$OUT" || true)

{
  echo "# Reliability"
  echo
  echo "Written by \`scripts/reliability.sh $RUNS\` on $(date -u +%F) at commit $(git rev-parse --short HEAD):"
  echo "$(nproc) cores, Redis $(redis-server --version | awk '{print $3}' | tr -d 'v=')."
  echo "Every scenario runs against real \`redis-server\` processes started on free loopback"
  echo "ports, with tollgate in-process and real gRPC clients; \`--failure-mode\` as named, a"
  echo "200 ms Redis deadline unless said otherwise. The same tests run in \`cargo test\`, where"
  echo "they assert the bounds (readiness within 2 s, decisions within 2 s of a promotion, every"
  echo "failed call answered by the failure policy)."
  echo
  echo "| scenario | measured |"
  echo "|---|---|"
  # --quiet prints a progress dot before a test's output: match anywhere in the line.
  grep -oE '(failover \(|sentinel failover|pause: |replica kill: |restart empty: |slot migration: |reshard: |outage, |recovery, |startup with|cluster outage|\[(single|cluster)).*' "$LOG" \
    | sed -E 's/^\[([^]]*)\] /script flush, \1: /' \
    | sed -E 's/^([^:]*): (.*)$/| \1 | \2 |/'
  echo
  echo "During a slot migration tollgate follows ASK itself (fred 10.1 cannot: src/store/redis/connection/migration.rs)."
  echo "A placement group of several keys where only some exist gets TRYAGAIN from Redis until the"
  echo "slot is handed over; such calls retry until the deadline, then the failure policy answers."
  echo "The 10-minute soak (a killed primary, a paused primary and a killed replica in turn under"
  echo "two instances) is \`scripts/soak.sh\`; its output, pasted by hand, is kept below. Redis"
  echo "over mutual TLS is tested in \`tests/server/redis_tls.rs\`."
  if [ -n "$SOAK" ]; then echo; echo "$SOAK"; fi
} > "$OUT"
echo "wrote $OUT" >&2
