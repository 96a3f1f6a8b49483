#!/usr/bin/env bash
# Soak: two tollgate instances on a 3 + 3 Redis Cluster under steady load while a fault is
# injected every 30 seconds (a primary killed and later restarted, a primary paused with SIGSTOP
# past the deadline, a replica killed and restarted), in turn. Not part of CI.
#
#   scripts/soak.sh [MINUTES]        # default 10
#
# Reports, per 30-second period: the fault, decisions, failed calls; then RSS of both instances
# over time, crashes, and over-admission. Over-admission is measured against the limit: 20 keys
# share 50 requests per minute each (fixed windows), and the load asks ~40 per key per second,
# so every key is exhausted in every window; the instances together may admit at most
# 20 x 50 per minute window the run touched. A primary kill can lose writes not yet replicated
# (Redis replication is asynchronous), so that fault may over-admit; the others must not.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

MINUTES=${1:-10}
PERIOD=30
KEYS=20
LIMIT=50
WORK=$(mktemp -d /tmp/tollgate-soak.XXXXXX)
PIDS=()

trap cleanup EXIT

need redis-server redis-cli python3 curl

build_bins

declare -A NODE_PID
start_node() { # port
  local port=$1
  mkdir -p "$WORK/r$port"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK/r$port" \
    --logfile "$WORK/r$port/log" --cluster-enabled yes --cluster-config-file "nodes.conf" \
    --cluster-node-timeout 2000 &
  NODE_PID[$port]=$!
  PIDS+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis on $port did not start" >&2; exit 1
}

cluster_ok() {
  for p in "${NODES[@]}"; do
    kill -0 "${NODE_PID[$p]}" 2>/dev/null || continue
    redis-cli -p "$p" cluster info 2>/dev/null | grep -q cluster_state:ok || return 1
  done
}

role_of() { redis-cli -p "$1" role 2>/dev/null | head -1; }

echo "starting a 3 + 3 Redis Cluster..." >&2
NODES=()
for _ in 1 2 3 4 5 6; do p=$(free_port); start_node "$p"; NODES+=("$p"); done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${NODES[@]}") --cluster-replicas 1 \
  --cluster-yes >/dev/null
for _ in $(seq 200); do cluster_ok && break; sleep 0.1; done

cat > "$WORK/soak.yaml" <<EOF
domain: soak
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: $LIMIT}
EOF

declare -a TG_PID TG_GRPC TG_HTTP
for i in 0 1; do
  TG_GRPC[$i]=$(free_port); TG_HTTP[$i]=$(free_port)
  $TG serve --config "$WORK/soak.yaml" --grpc-addr "127.0.0.1:${TG_GRPC[$i]}" \
    --http-addr "127.0.0.1:${TG_HTTP[$i]}" --log warn \
    --redis-url "redis-cluster://127.0.0.1:${NODES[0]}" --redis-timeout 100ms \
    2>"$WORK/tollgate-$i.log" &
  TG_PID[$i]=$!; PIDS+=($!)
done
for i in 0 1; do
  for _ in $(seq 150); do
    curl -sf "http://127.0.0.1:${TG_HTTP[$i]}/readyz" >/dev/null 2>&1 && break; sleep 0.1
  done
done

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

primaries() { for p in "${NODES[@]}"; do kill -0 "${NODE_PID[$p]}" 2>/dev/null && [ "$(role_of "$p")" = master ] && echo "$p"; done; }
replicas() { for p in "${NODES[@]}"; do kill -0 "${NODE_PID[$p]}" 2>/dev/null && [ "$(role_of "$p")" = slave ] && echo "$p"; done; }

# A fault starts 5 s into its period; killed nodes come back 15 s later.
fault() { # n
  case $(( $1 % 3 )) in
    0) local p; p=$(primaries | head -1)
       echo "kill primary $p (restarted 15 s later)"
       ( sleep 5; kill -9 "${NODE_PID[$p]}"; sleep 15; start_node_quiet "$p" ) >/dev/null 2>&1 & ;;
    1) local p; p=$(primaries | tail -1)
       echo "SIGSTOP primary $p for 3 s"
       ( sleep 5; kill -STOP "${NODE_PID[$p]}"; sleep 3; kill -CONT "${NODE_PID[$p]}" ) >/dev/null 2>&1 & ;;
    2) local r; r=$(replicas | head -1)
       echo "kill replica $r (restarted 15 s later)"
       ( sleep 5; kill -9 "${NODE_PID[$r]}"; sleep 15; start_node_quiet "$r" ) >/dev/null 2>&1 & ;;
  esac
}

start_node_quiet() { # restart a node on its port with its saved cluster config
  local port=$1
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK/r$port" \
    --logfile "$WORK/r$port/log" --cluster-enabled yes --cluster-config-file "nodes.conf" \
    --cluster-node-timeout 2000 &
  echo $! > "$WORK/r$port/pid"
}

refresh_pids() {
  for p in "${NODES[@]}"; do
    if [ -f "$WORK/r$p/pid" ]; then NODE_PID[$p]=$(cat "$WORK/r$p/pid"); PIDS+=("${NODE_PID[$p]}"); rm -f "$WORK/r$p/pid"; fi
  done
}

PERIODS=$(( MINUTES * 60 / PERIOD ))
START=$(date +%s)
echo "soak: $MINUTES min, $PERIODS periods of $PERIOD s, faults in turn" >&2
printf '| period | fault | decisions | OK | OVER_LIMIT | failed | RSS MiB (a / b) |\n|---|---|---|---|---|---|---|\n' > "$WORK/table"
RSS_LOG=()
for n in $(seq 0 $((PERIODS - 1))); do
  refresh_pids
  what=$(fault "$n")
  benches=()
  for i in 0 1; do
    $BENCH --addr "http://127.0.0.1:${TG_GRPC[$i]}" --domain soak --descriptor 'tenant={key}' \
      --keys "$KEYS" --rate 400 --concurrency 64 --duration "${PERIOD}s" --warmup 0s \
      --timeout 1s --json > "$WORK/bench-$n-$i.json" 2>/dev/null &
    benches+=($!)
  done
  wait "${benches[@]}" 2>/dev/null || true
  sleep 1
  refresh_pids
  rss_a=$(( $(rss_kib "${TG_PID[0]}") / 1024 )); rss_b=$(( $(rss_kib "${TG_PID[1]}") / 1024 ))
  RSS_LOG+=("$rss_a/$rss_b")
  python3 - "$n" "$what" "$rss_a" "$rss_b" "$WORK/bench-$n-0.json" "$WORK/bench-$n-1.json" >> "$WORK/table" <<'PY'
import json, sys
n, what, ra, rb, *files = sys.argv[1:]
tot = {"requests": 0, "ok": 0, "over_limit": 0, "errors": 0}
for f in files:
    try:
        d = json.load(open(f))
    except Exception:
        d = {}
    for k in tot:
        tot[k] += d.get(k, 0)
print(f"| {n} | {what} | {tot['requests']:,} | {tot['ok']:,} | {tot['over_limit']:,} | {tot['errors']:,} | {ra} / {rb} |")
PY
  echo "period $n done: $what" >&2
done
END=$(date +%s)

crashes=0
for i in 0 1; do kill -0 "${TG_PID[$i]}" 2>/dev/null || crashes=$((crashes + 1)); done
windows=$(( (END / 60) - (START / 60) + 1 ))
ok_total=$(python3 -c "
import json, glob
print(sum(json.load(open(f)).get('ok', 0) for f in glob.glob('$WORK/bench-*.json')))")
bound=$(( KEYS * LIMIT * windows ))

echo
echo "## Soak: $MINUTES minutes, $(date -u +%F), commit $(git rev-parse --short HEAD)"
echo
cat "$WORK/table"
echo
echo "Crashes: $crashes. RSS (MiB, instance a / b) per period: ${RSS_LOG[*]}."
echo "Admitted $ok_total over $windows minute windows; the limit allows at most $bound"
echo "($KEYS keys x $LIMIT x $windows): over-admission $(( ok_total > bound ? ok_total - bound : 0 ))."
