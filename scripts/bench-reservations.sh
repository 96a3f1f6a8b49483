#!/usr/bin/env bash
# What a reservation costs next to a plain charge (issue 44), and next to what it replaces (a
# usage domain's check at cost 0 and charge at the stream's end, on a second tollgate run with
# --usage-domains bench), through tollgate on one Redis:
# Redis CPU per call (INFO commandstats: the script's µs per EVALSHA, and the script calls
# each call made) and the latency a caller sees, from reservations-bench (tollgate-bench's
# second binary). Rounds alternate the two, so drift hits both alike.
#
#   scripts/bench-reservations.sh [ROUNDS] [SECONDS]     # default 3 rounds of 8 s each
#
# Prints a Markdown table per round and the medians; BENCHMARKS.md quotes them.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ROUNDS=${1:-3}
SECONDS_EACH=${2:-8}
WORK=$(mktemp -d /tmp/tollgate-bench-rsv.XXXXXX)
PIDS=()
trap cleanup EXIT
need redis-server redis-cli python3

build_bins
RSV=target/release/reservations-bench
REDIS=$(free_port); start_redis "$REDIS"
PORT=$(free_port); HTTP=$(free_port)
$TG serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$PORT" --http-addr "127.0.0.1:$HTTP" \
  --log error --redis-url "redis://127.0.0.1:$REDIS" --redis-timeout 100ms &
PIDS+=($!)
UPORT=$(free_port); UHTTP=$(free_port)
# The usage domain's server: examples/bench.yaml's rsv limit alone (its leased limit cannot be
# an overdraft limit).
printf 'domain: bench\ndescriptors:\n  - key: rsv\n    rate_limit: {unit: minute, requests_per_unit: 4000000000}\n' \
  >"$WORK/usage.yaml"
$TG serve --config "$WORK/usage.yaml" --grpc-addr "127.0.0.1:$UPORT" --http-addr "127.0.0.1:$UHTTP" \
  --log error --redis-url "redis://127.0.0.1:$REDIS" --redis-timeout 100ms --usage-domains bench &
PIDS+=($!)
for h in "$HTTP" "$UHTTP"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$h/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
done

evalsha() { # "usec calls" of EVALSHA since the last CONFIG RESETSTAT
  redis-cli -p "$REDIS" info commandstats | python3 -c '
import sys
for l in sys.stdin:
    if l.startswith("cmdstat_evalsha:"):
        d = dict(kv.split("=") for kv in l.split(":", 1)[1].strip().split(","))
        print(d["usec"], d["calls"]); break
else:
    print(0, 0)'
}

RESULTS=$WORK/results.jsonl
for round in $(seq "$ROUNDS"); do
  for op in charge reserve-settle check-charge; do
    port=$PORT; [ "$op" = check-charge ] && port=$UPORT
    # warm up, then measure from a reset
    $RSV --addr "http://127.0.0.1:$port" --op "$op" --seconds 1 >/dev/null
    redis-cli -p "$REDIS" config resetstat >/dev/null
    json=$($RSV --addr "http://127.0.0.1:$port" --op "$op" --seconds "$SECONDS_EACH")
    read -r usec calls < <(evalsha)
    python3 - "$round" "$usec" "$calls" "$json" >>"$RESULTS" <<'PY'
import json, sys
rnd, usec, calls, raw = sys.argv[1:]
d = json.loads(raw)
d.update(round=int(rnd), evalsha_usec=int(usec), evalsha_calls=int(calls))
print(json.dumps(d))
PY
    echo "round $round: $op done" >&2
  done
done

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# Redis's figures are per run: a reserve and its settle (a check and its charge) share theirs.
print("| call | calls/s | p50 ms | p99 ms | script calls per call | Redis µs per script call | Redis µs per call |")
print("|---|---|---|---|---|---|---|")
med = statistics.median
for name, op in (("charge", "Charge"), ("reserve", "ReserveSettle"), ("settle", "ReserveSettle"),
                 ("check", "CheckCharge"), ("usage", "CheckCharge")):
    rs = [r for r in rows if r["op"] == op]
    if not rs:
        continue
    per = lambda r: r["calls"][name]
    calls_all = lambda r: sum(c["calls"] for c in r["calls"].values())
    script_per_call = med(r["evalsha_calls"] / calls_all(r) for r in rs)
    us_per_script = med(r["evalsha_usec"] / r["evalsha_calls"] for r in rs)
    print("| %s | %s | %.3f | %.3f | %.2f | %.2f | %.2f |" % (
        name,
        "{:,.0f}".format(med(per(r)["per_sec"] for r in rs)),
        med(per(r)["p50_us"] for r in rs) / 1000,
        med(per(r)["p99_us"] for r in rs) / 1000,
        script_per_call, us_per_script, script_per_call * us_per_script))
print()
print("errors: %d" % sum(r["errors"] for r in rows))
PY
