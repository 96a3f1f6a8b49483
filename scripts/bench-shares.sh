#!/usr/bin/env bash
# How a contended pool is shared out (issue 47): 10 tenants, tenant 0 sending 10 times what
# the others send, two classes (tenant 0 and the odd ones batch, the even ones interactive),
# against a pool of 200 a second. Once without shares (first come, first served), then with
# interactive guaranteed 50% and batch 30%, borrowing up to 80% (the default), then up to 50%
# (1 - the larger guarantee: with two classes, each one's whole guarantee in every window), then
# with a fair share among the active tenants (fair_share with its defaults: past 30% of the
# pool, each tenant up to the pool ÷ the active tenants).
# tollgate on the memory store; shares-bench (tollgate-bench's third binary) sends open-loop
# and prints who got what.
#
#   scripts/bench-shares.sh [SECONDS]     # default 10 s each
#
# Prints a Markdown table per run; BENCHMARKS.md quotes them.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

SECONDS_EACH=${1:-10}
WORK=$(mktemp -d /tmp/tollgate-bench-shares.XXXXXX)
PIDS=()
trap cleanup EXIT
need python3 curl

build_bins
cat >"$WORK/pool.yaml" <<'YAML'
domain: plain
descriptors:
  - key: model
    value: gpt-4o
    hierarchical: true
    rate_limit: {name: pool, unit: second, requests_per_unit: 200, shared: true}
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
YAML
cat >"$WORK/shares.yaml" <<'YAML'
domain: shares
descriptors:
  - key: model
    value: gpt-4o
    hierarchical: true
    rate_limit:
      name: pool
      unit: second
      requests_per_unit: 200
      shared: true
      shares: {by: priority, classes: {interactive: 0.5, batch: 0.3}, default: batch, borrow_until: 0.8}
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
YAML
sed 's/^domain: shares$/domain: strict/; s/borrow_until: 0.8/borrow_until: 0.5/' "$WORK/shares.yaml" >"$WORK/strict.yaml"
cat >"$WORK/fair.yaml" <<'YAML'
domain: fair
descriptors:
  - key: model
    value: gpt-4o
    hierarchical: true
    rate_limit: {name: pool, unit: second, requests_per_unit: 200, shared: true, fair_share: {by: tenant}}
    descriptors: [{key: tenant, descriptors: [{key: priority}]}]
YAML
PORT=$(free_port); HTTP=$(free_port)
$TG serve --config "$WORK" --grpc-addr "127.0.0.1:$PORT" --http-addr "127.0.0.1:$HTTP" --log error &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$HTTP/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
for domain in plain shares strict fair; do
  echo
  case $domain in
    plain) echo "### no shares (pool of 200 a second)" ;;
    shares) echo "### shares: interactive 50%, batch 30%, borrow_until 0.8" ;;
    strict) echo "### shares: interactive 50%, batch 30%, borrow_until 0.5" ;;
    fair) echo "### fair share among active tenants (above 0.3, floor 1)" ;;
  esac
  echo
  target/release/shares-bench --addr "http://127.0.0.1:$PORT" --domain "$domain" --seconds "$SECONDS_EACH"
done
