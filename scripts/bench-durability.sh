#!/usr/bin/env bash
# What --redis-wait-replicas costs (issue 46): each call that charges followed by Redis
# `WAIT 1 <ms>` on its connection, against the same tollgate with the setting off, on a primary
# with one replica and on a 3-primary, 3-replica Redis Cluster, all on this machine.
#
#   scripts/bench-durability.sh [DURATION] [ROUNDS]     # default 5s per run, 3 rounds
#   TG_OLD=/path/to/old/tollgate scripts/bench-durability.sh 5s 5
#     adds a third setting: the setting on, run by another build (before/after in one run)
#
# Scenario (a) of scripts/bench.sh (1 descriptor, 10,000 keys; tollgate-bench's closed loop, 64
# in flight over 4 connections) for decisions/s and latency under load, then its scenario (e)
# (the same at an open-loop 2,000/s) for the latency one replica round trip adds without
# queueing. Redis CPU per decision (INFO cpu) is summed over the primaries and over the replicas
# apart; INFO commandstats gives WAIT calls per decision (calls arriving together share one
# script call and one WAIT). Settings alternate within a round (the order flips each round) so
# drift on a shared box hits both alike. Prints every run, then the medians as a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

DURATION=${1:-5s}
ROUNDS=${2:-3}
WARMUP=2s
RATE=2000
REDIS_TIMEOUT=100ms
WORK=$(mktemp -d /tmp/tollgate-bench-durability.XXXXXX)
PIDS=()
trap cleanup EXIT

need redis-server redis-cli python3 curl

build_bins
STARTED=$(date +%s)

info_field() { # port section field
  redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'
}


cmd_calls() { # "wait evalsha" calls summed over the given ports since CONFIG RESETSTAT
  for p in "$@"; do redis-cli -p "$p" info commandstats; done | python3 -c '
import sys
calls = {"wait": 0, "evalsha": 0}
for l in sys.stdin:
    name, _, rest = l.strip().partition(":")
    cmd = name.removeprefix("cmdstat_")
    if name.startswith("cmdstat_") and cmd in calls:
        calls[cmd] += int(dict(kv.split("=") for kv in rest.split(","))["calls"])
print(calls["wait"], calls["evalsha"])'
}

# Waits until every replica among the given ports has its link to its primary up and every
# primary among them counts WANT connected replicas.
wait_replication() { # want ports...
  local want=$1; shift
  local p ok
  for _ in $(seq 200); do
    ok=1
    for p in "$@"; do
      case $(info_field "$p" replication role) in
        slave) [ "$(info_field "$p" replication master_link_status)" = up ] || ok=0 ;;
        master) [ "$(info_field "$p" replication connected_slaves)" -ge "$want" ] || ok=0 ;;
      esac
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  echo "replication did not come up on $*" >&2; exit 1
}

roles() { # sets PRIMARIES and REPLICAS from the given ports' ROLE
  PRIMARIES=(); REPLICAS=()
  local p
  for p in "$@"; do
    if [ "$(info_field "$p" replication role)" = master ]; then PRIMARIES+=("$p"); else REPLICAS+=("$p"); fi
  done
}

start_tollgate() { # name url wait_replicas [binary]: sets TG_PID and TG_PORT, waits for /readyz
  local name=$1 url=$2 n=$3 bin=${4:-$TG}
  TG_PORT=$(free_port); local http; http=$(free_port)
  $bin serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$TG_PORT" --http-addr "127.0.0.1:$http" \
    --log warn --redis-url "$url" --redis-timeout "$REDIS_TIMEOUT" --redis-wait-replicas "$n" \
    2>"$WORK/$name.log" &
  TG_PID=$!; PIDS+=("$TG_PID")
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$TG_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "tollgate ($name) did not become ready; log:" >&2; cat "$WORK/$name.log" >&2; exit 1
}

RESULTS=$WORK/results.jsonl
SHOW_RUN='
import json, sys
r = json.loads(sys.stdin.read())
ms = lambda k: "%.3f" % (r[k] / 1e3)
print("  %s wait %d%s: %s/s  p50 %s  p99 %s  p99.9 %s ms  Redis %.1f + %.1f us/decision  "
      "WAIT/decision %.3f  EVALSHA/decision %.3f  errors %d | open %s/s  p50 %s  p99 %s ms  "
      "WAIT/decision %.3f  errors %d" % (
      r["store"], r["n"], " (old build)" if r["build"] == "old" else "", format(round(r["dps"]), ","), ms("p50"), ms("p99"), ms("p999"),
      r["primary_us"], r["replica_us"], r["wait_per_dec"], r["evalsha_per_dec"], r["errors"],
      format(round(r["open_dps"]), ","), ms("open_p50"), ms("open_p99"), r["open_wait_per_dec"],
      r["open_errors"]))'
# measure STORE N BUILD TG_PORT ALL_PORTS...: one closed-loop and one open-loop run, appended to
# RESULTS
measure() {
  local store=$1 n=$2 build=$3 port=$4; shift 4
  local all=("$@") rp0 rp1 rr0 rr1 closed open w_c e_c w_o e_o
  roles "${all[@]}"
  local addr="http://127.0.0.1:$port" args=(--domain bench --descriptor 'key={key}' --keys 10000)
  # Warm up in a separate run, so the CPU measured below covers exactly the counted decisions.
  $BENCH --addr "$addr" "${args[@]}" --duration "$WARMUP" --warmup 0s --json >/dev/null 2>&1
  for p in "${all[@]}"; do redis-cli -p "$p" config resetstat >/dev/null; done
  rp0=$(redis_cpu "${PRIMARIES[@]}"); rr0=$(redis_cpu "${REPLICAS[@]}")
  closed=$($BENCH --addr "$addr" "${args[@]}" --duration "$DURATION" --warmup 0s --json 2>/dev/null)
  rp1=$(redis_cpu "${PRIMARIES[@]}"); rr1=$(redis_cpu "${REPLICAS[@]}")
  read -r w_c e_c < <(cmd_calls "${PRIMARIES[@]}")
  # The open loop's warm-up too runs apart, so commandstats count only measured decisions.
  $BENCH --addr "$addr" "${args[@]}" --rate "$RATE" --duration 1s --warmup 0s --json >/dev/null 2>&1
  for p in "${all[@]}"; do redis-cli -p "$p" config resetstat >/dev/null; done
  open=$($BENCH --addr "$addr" "${args[@]}" --rate "$RATE" --duration "$DURATION" --warmup 0s \
    --json 2>/dev/null)
  read -r w_o e_o < <(cmd_calls "${PRIMARIES[@]}")
  python3 - "$store" "$n" "$build" "$rp0" "$rp1" "$rr0" "$rr1" "$w_c" "$e_c" "$w_o" "$e_o" \
    "${#PRIMARIES[@]}" "${#REPLICAS[@]}" "$closed" "$open" >>"$RESULTS" <<'PY'
import json, sys
store, n, build, rp0, rp1, rr0, rr1, w_c, e_c, w_o, e_o, np_, nr, closed, opened = sys.argv[1:]
c, o = json.loads(closed), json.loads(opened)
dec = c["decisions"] or 1
print(json.dumps({
    "store": store, "n": int(n), "build": build, "primaries": int(np_), "replicas": int(nr),
    "dps": c["decisions_per_sec"], "decisions": c["decisions"],
    "p50": c["p50_us"], "p99": c["p99_us"], "p999": c["p999_us"], "max": c["max_us"],
    "errors": c["errors"], "errors_by_code": c["errors_by_code"],
    "primary_us": (float(rp1) - float(rp0)) / dec * 1e6,
    "replica_us": (float(rr1) - float(rr0)) / dec * 1e6,
    "wait_per_dec": int(w_c) / dec, "evalsha_per_dec": int(e_c) / dec,
    "open_dps": o["decisions_per_sec"], "open_p50": o["p50_us"], "open_p99": o["p99_us"],
    "open_errors": o["errors"], "open_errors_by_code": o["errors_by_code"],
    "open_wait_per_dec": int(w_o) / (o["decisions"] or 1),
    "open_evalsha_per_dec": int(e_o) / (o["decisions"] or 1),
    "late": o["late"], "unsent": o["unsent"],
}))
PY
  tail -1 "$RESULTS" | python3 -c "$SHOW_RUN" >&2
}

# bench_store STORE URL PORTS...: ROUNDS rounds, each running N=0 and N=1 (and N=1 on TG_OLD's
# build when set; the order turns each round), on tollgates started for each setting and stopped
# after the store's runs.
bench_store() {
  local store=$1 url=$2; shift 2
  local off_pid off_port on_pid on_port old_pid=() old_port="" round settings s i
  start_tollgate "$store-off" "$url" 0; off_pid=$TG_PID; off_port=$TG_PORT
  start_tollgate "$store-on" "$url" 1; on_pid=$TG_PID; on_port=$TG_PORT
  settings=(off on)
  if [ -n "${TG_OLD:-}" ]; then
    start_tollgate "$store-old" "$url" 1 "$TG_OLD"; old_pid=("$TG_PID"); old_port=$TG_PORT
    settings+=(old)
  fi
  for round in $(seq "$ROUNDS"); do
    for i in "${!settings[@]}"; do
      s=${settings[$(( (i + round - 1) % ${#settings[@]} ))]}
      echo "$store, round $round, $s..." >&2
      case $s in
        off) measure "$store" 0 new "$off_port" "$@" ;;
        on) measure "$store" 1 new "$on_port" "$@" ;;
        old) measure "$store" 1 old "$old_port" "$@" ;;
      esac
    done
  done
  kill "$off_pid" "$on_pid" "${old_pid[@]}"; wait "$off_pid" "$on_pid" "${old_pid[@]}" 2>/dev/null || true
  for s in "${settings[@]}"; do
    if grep -qiE 'warn|error' "$WORK/$store-$s.log"; then
      echo "tollgate ($store, $s) logged $(grep -ciE 'warn|error' "$WORK/$store-$s.log") warning/error line(s):" >&2
      sort "$WORK/$store-$s.log" | uniq -c | sort -rn | head -5 >&2
    fi
  done
}

echo "a primary with one replica..." >&2
PRIMARY=$(free_port); start_redis "$PRIMARY"
REPLICA=$(free_port); start_redis "$REPLICA" --replicaof 127.0.0.1 "$PRIMARY"
wait_replication 1 "$PRIMARY" "$REPLICA"
bench_store replica "redis://127.0.0.1:$PRIMARY" "$PRIMARY" "$REPLICA"
redis-cli -p "$REPLICA" shutdown nosave >/dev/null 2>&1 || true
redis-cli -p "$PRIMARY" shutdown nosave >/dev/null 2>&1 || true

echo "a 3-primary, 3-replica cluster..." >&2
NODES=()
for _ in $(seq 6); do
  p=$(free_port); start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf"
  NODES+=("$p")
done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${NODES[@]}") --cluster-replicas 1 \
  --cluster-yes >"$WORK/cluster-create.log" 2>&1 \
  || { cat "$WORK/cluster-create.log" >&2; exit 1; }
for p in "${NODES[@]}"; do
  for _ in $(seq 100); do redis-cli -p "$p" cluster info | grep -q cluster_state:ok && break; sleep 0.1; done
done
wait_replication 1 "${NODES[@]}"
# tollgate counts each primary's replicas in CLUSTER NODES at start: wait until every node
# lists all three replicas under their primaries.
for p in "${NODES[@]}"; do
  for _ in $(seq 200); do
    [ "$(redis-cli -p "$p" cluster nodes | awk '$3 ~ /slave/ && $4 != "-"' | wc -l)" = 3 ] && break
    sleep 0.1
  done
done
roles "${NODES[@]}"
[ "${#PRIMARIES[@]}" = 3 ] && [ "${#REPLICAS[@]}" = 3 ] \
  || { echo "expected 3 primaries and 3 replicas, got ${PRIMARIES[*]} / ${REPLICAS[*]}" >&2; exit 1; }
bench_store cluster "redis-cluster://127.0.0.1:${PRIMARIES[0]}" "${NODES[@]}"
roles "${NODES[@]}"
[ "${#PRIMARIES[@]}" = 3 ] || echo "warning: the cluster's roles changed during the runs" >&2

REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src 2>/dev/null || REV="$REV with uncommitted changes in src/"
python3 - "$RESULTS" "$DURATION" "$ROUNDS" "$RATE" "$(( $(date +%s) - STARTED ))" \
  "$(redis-server --version | awk '{print $3}' | cut -d= -f2)" "$REV" <<'PY'
import json, statistics, sys
path, duration, rounds, rate, took, redis, rev = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
med = statistics.median
names = {"replica": "primary + 1 replica", "cluster": "cluster, 3 primaries + 3 replicas"}
for r in rows:
    r.setdefault("build", "new")
# Settings: (N, build); the old build's only with TG_OLD.
SETTINGS = [(0, "new"), (1, "new"), (1, "old")]
label = lambda n, b: ("off" if n == 0 else f"--redis-wait-replicas {n}") + (" (old build)" if b == "old" else "")
ms = lambda us: f"{us / 1e3:.3f}"

print()
print("## Every run")
print()
print("| store | setting | decisions/s | p50 ms | p99 ms | p99.9 ms | open-loop p50 ms | open-loop p99 ms "
      "| Redis µs/decision primaries | replicas | WAIT / decision | open-loop WAIT / decision | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {names[r['store']]} | {label(r['n'], r['build'])} | {r['dps']:,.0f} | {ms(r['p50'])} | {ms(r['p99'])} | "
          f"{ms(r['p999'])} | {ms(r['open_p50'])} | {ms(r['open_p99'])} | {r['primary_us']:.1f} | "
          f"{r['replica_us']:.1f} | {r['wait_per_dec']:.3f} | {r['open_wait_per_dec']:.3f} | "
          f"{r['errors']} / {r['open_errors']} |")

print()
print(f"## Medians of {rounds} runs ({duration} each; closed loop 64 in flight over 4 connections, "
      f"open loop {int(rate):,}/s)")
print()
print("| store | setting | decisions/s | p50 ms | p99 ms | p99.9 ms | open-loop p50 ms | open-loop p99 ms "
      "| Redis µs/decision primaries | replicas | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
M = {}
for store in ("replica", "cluster"):
    for n, build in SETTINGS:
        rs = [r for r in rows if r["store"] == store and r["n"] == n and r["build"] == build]
        if not rs:
            continue
        m = {k: med(r[k] for r in rs) for k in ("dps", "p50", "p99", "p999", "open_p50", "open_p99",
                                                 "primary_us", "replica_us", "wait_per_dec",
                                                 "evalsha_per_dec", "open_wait_per_dec",
                                                 "open_evalsha_per_dec")}
        m["errors"] = sum(r["errors"] + r["open_errors"] for r in rs)
        M[store, n, build] = m
        setting = label(n, build)
        print(f"| {names[store]} | {setting} | {m['dps']:,.0f} | {ms(m['p50'])} | {ms(m['p99'])} | "
              f"{ms(m['p999'])} | {ms(m['open_p50'])} | {ms(m['open_p99'])} | {m['primary_us']:.1f} | "
              f"{m['replica_us']:.1f} | {m['errors']} |")

print()
print("## Added by the setting (median on − median off; the old build's on against this build's off)")
print()
print("| store | build | decisions/s | p50 ms | p99 ms | p99.9 ms | open-loop p50 ms | open-loop p99 ms "
      "| Redis µs/decision primaries | replicas |")
print("|---|---|---|---|---|---|---|---|---|---|")
for store, build in [(s, b) for s in ("replica", "cluster") for b in ("new", "old")]:
    if (store, 0, "new") not in M or (store, 1, build) not in M:
        continue
    a, b = M[store, 0, "new"], M[store, 1, build]
    d = lambda k: b[k] - a[k]
    print(f"| {names[store]} | {build} | {d('dps'):+,.0f} ({d('dps') / a['dps'] * 100:+.0f}%) | {d('p50') / 1e3:+.3f} | "
          f"{d('p99') / 1e3:+.3f} | {d('p999') / 1e3:+.3f} | {d('open_p50') / 1e3:+.3f} | "
          f"{d('open_p99') / 1e3:+.3f} | {d('primary_us'):+.1f} | {d('replica_us'):+.1f} |")

print()
print("## WAIT calls per decision (INFO commandstats on the primaries; medians)")
print()
print("| store | setting | closed loop: EVALSHA / decision | WAIT / decision | open loop: EVALSHA / decision | WAIT / decision |")
print("|---|---|---|---|---|---|")
for (store, n, build), m in M.items():
    print(f"| {names[store]} | {label(n, build)} | {m['evalsha_per_dec']:.3f} | {m['wait_per_dec']:.3f} | "
          f"{m['open_evalsha_per_dec']:.3f} | {m['open_wait_per_dec']:.3f} |")
print()
print(f"Took {took} s (after the build). Redis {redis}; tollgate built from {rev}.")
PY
