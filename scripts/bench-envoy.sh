#!/usr/bin/env bash
# Through a real Envoy: HTTP load (h2load) into Envoy's ratelimit filter, asking tollgate or
# limitador, on the in-memory store and on one Redis, in the same run; prints a Markdown table.
#
#   LIMITADOR_BIN=/path/to/limitador-server scripts/bench-envoy.sh [RUNS] [DURATION]
#
# One front Envoy (scripts/get-envoy.sh, --concurrency 1) has three listeners on one route
# config: `off` (no ratelimit filter), `tollgate` and `limitador` (the filter asking that
# service, failing closed, so a failed call is a failed request). Every request's descriptor is
# `key=<:path>` over 10,000 paths (h2load -i), the limits of examples/bench.yaml and
# examples/limitador-bench.yaml (never denying). The backend is a second Envoy answering 200
# from a direct_response. For each store, RUNS rounds (default 3) of DURATION (default 10s),
# the three listeners alternating within a round:
#
# - open loop: h2load --rps at RATE requests/s in all (default 1000, below saturation here),
#   4 clients, up to 64 streams each; p50/p99 from h2load's per-request log. *added p99* =
#   p99 with the filter minus p99 of `off` in the same round.
# - closed loop: 16 clients, 4 streams each, as fast as it goes: requests/s, and CPU seconds
#   per request of the front Envoy, the rate limit service and Redis (/proc, over the run).
#
# limitador is not on crates.io and is not built here: point LIMITADOR_BIN at a
# limitador-server you built from its repository (memory store with --cache 100000, as
# scripts/bench-compare.sh). TOLLGATE_PROFILE=dist measures the container image's build;
# TOLLGATE_ARGS adds arguments to `tollgate serve`.
# Needs h2load (Debian: nghttp2-client), redis-server, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

RUNS=${1:-3}
DURATION=${2:-10s}
RATE=${RATE:-1000}
LIMITADOR=${LIMITADOR_BIN:?set LIMITADOR_BIN to a limitador-server binary}
read -r -a TG_ARGS <<< "${TOLLGATE_ARGS:-}"
WORK=$(mktemp -d /tmp/tollgate-bench-envoy.XXXXXX)
PIDS=()
trap cleanup EXIT

need h2load redis-server redis-cli python3
[ -x "$LIMITADOR" ] || { echo "error: LIMITADOR_BIN=$LIMITADOR is not executable" >&2; exit 1; }
ENVOY=$(bash scripts/get-envoy.sh)
build_bins

REDIS=$(free_port)
start_redis "$REDIS"
REDIS_PID=${PIDS[-1]}

wait_port() {
  for _ in $(seq 200); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 0.2)" \
      "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1" >&2; exit 1
}

# bootstrap.py ROLE ...: an Envoy bootstrap (JSON) on stdout.
cat >"$WORK/bootstrap.py" <<'PY'
import json, sys
def addr(p): return {"socket_address": {"address": "127.0.0.1", "port_value": int(p)}}
def cluster(name, port, h2=False):
    c = {"name": name, "type": "STATIC", "connect_timeout": "1s",
         "load_assignment": {"cluster_name": name,
                             "endpoints": [{"lb_endpoints": [{"endpoint": {"address": addr(port)}}]}]}}
    if h2:
        c["circuit_breakers"] = {"thresholds": [{"max_requests": 100000, "max_pending_requests": 100000}]}
        c["typed_extension_protocol_options"] = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}}
    else:
        c["circuit_breakers"] = {"thresholds": [{"max_requests": 100000, "max_pending_requests": 100000}]}
    return c
def listener(name, port, routes, filters):
    return {"name": name, "address": addr(port), "filter_chains": [{"filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": name, "route_config": {"virtual_hosts": [{"name": name, "domains": ["*"], "routes": routes}]},
            "http_filters": filters + [{"name": "envoy.filters.http.router", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}]}
def ratelimit(cluster_name):
    return [{"name": "envoy.filters.http.ratelimit", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
        "domain": "bench", "timeout": "1s", "failure_mode_deny": True,
        "rate_limit_service": {"transport_api_version": "V3",
                               "grpc_service": {"envoy_grpc": {"cluster_name": cluster_name}}}}}]
role, admin = sys.argv[1], sys.argv[2]
if role == "backend":
    port = sys.argv[3]
    listeners = [listener("backend", port, [{"match": {"prefix": "/"},
        "direct_response": {"status": 200, "body": {"inline_string": "ok"}}}], [])]
    clusters = []
else:
    off, tg, lim, backend, tg_rls, lim_rls = sys.argv[3:9]
    route = [{"match": {"prefix": "/"}, "route": {"cluster": "backend", "rate_limits": [
        {"actions": [{"request_headers": {"header_name": ":path", "descriptor_key": "key"}}]}]}}]
    listeners = [listener("off", off, route, []),
                 listener("tollgate", tg, route, ratelimit("rls_tollgate")),
                 listener("limitador", lim, route, ratelimit("rls_limitador"))]
    clusters = [cluster("backend", backend), cluster("rls_tollgate", tg_rls, True),
                cluster("rls_limitador", lim_rls, True)]
print(json.dumps({"admin": {"address": addr(admin)},
                  "static_resources": {"listeners": listeners, "clusters": clusters}}))
PY

start_envoy() { # NAME BOOTSTRAP-ARGS...: starts an Envoy, sets PID
  local name=$1; shift
  python3 "$WORK/bootstrap.py" "$@" >"$WORK/$name.json"
  "$ENVOY" -c "$WORK/$name.json" --concurrency 1 --disable-hot-restart -l error \
    --log-path "$WORK/$name.log" &
  PID=$!; PIDS+=("$PID")
}

BACKEND=$(free_port)
start_envoy backend backend "$(free_port)" "$BACKEND"
wait_port "$BACKEND"

# uris PORT: 10,000 request URIs on that listener, one per line.
uris() {
  python3 -c "import sys; print('\n'.join(f'http://127.0.0.1:{sys.argv[1]}/k/{i}' for i in range(10000)))" \
    "$1" >"$WORK/uris-$1"
  echo "$WORK/uris-$1"
}

RESULTS=$WORK/results
for store in memory redis; do
  start_rls tollgate "$store"; TG_PID=$PID; TG_PORT=$PORT
  start_rls limitador "$store"; LIM_PID=$PID; LIM_PORT=$PORT
  OFF=$(free_port); ON_TG=$(free_port); ON_LIM=$(free_port)
  start_envoy front front "$(free_port)" "$OFF" "$ON_TG" "$ON_LIM" "$BACKEND" "$TG_PORT" "$LIM_PORT"
  FRONT=$PID
  for p in "$OFF" "$ON_TG" "$ON_LIM"; do wait_port "$p"; done
  declare -A LISTEN=([off]=$OFF [tollgate]=$ON_TG [limitador]=$ON_LIM)
  declare -A RLS=([off]=0 [tollgate]=$TG_PID [limitador]=$LIM_PID)
  for which in off tollgate limitador; do   # warm every path (connections, counters)
    h2load -c 4 -m 16 -D 2 -i "$(uris "${LISTEN[$which]}")" >/dev/null 2>&1 || true
  done
  for run in $(seq 1 "$RUNS"); do
    for which in off tollgate limitador; do
      f=$(uris "${LISTEN[$which]}")
      h2load -c 4 -m 64 -t 1 --rps $((RATE / 4)) -D "$DURATION" -i "$f" \
        --log-file "$WORK/open.log" >"$WORK/open.out" 2>&1 || true
      rls=${RLS[$which]}
      e0=$(cpu_s "$FRONT"); r0=$(cpu_s "$REDIS_PID"); s0=0; [ "$rls" = 0 ] || s0=$(cpu_s "$rls")
      h2load -c 16 -m 4 -t 1 -D "$DURATION" -i "$f" >"$WORK/closed.out" 2>&1 || true
      e1=$(cpu_s "$FRONT"); r1=$(cpu_s "$REDIS_PID"); s1=0; [ "$rls" = 0 ] || s1=$(cpu_s "$rls")
      python3 - "$store" "$which" "$run" "$WORK/open.log" "$WORK/open.out" "$WORK/closed.out" \
        "$e0" "$e1" "$s0" "$s1" "$r0" "$r1" >>"$RESULTS" <<'PY'
import json, re, sys
store, which, run, log, open_out, closed_out = sys.argv[1:7]
e0, e1, s0, s1, r0, r1 = map(float, sys.argv[7:13])
lat = sorted(int(l.split("\t")[2]) for l in open(log) if l.strip())
ok_open = sum(1 for l in open(log) if l.split("\t")[1] == "200")
def pct(p): return lat[min(len(lat) - 1, int(p * len(lat)))] / 1000 if lat else float("nan")
text = open(closed_out).read()
rps = float(re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", text).group(1))
m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", text).group(1))
bad = int(m.group(3)) + int(m.group(4)) + (len(lat) - ok_open)
n = max(done, 1)
print(json.dumps({"store": store, "which": which, "run": int(run), "p50": pct(0.50),
                  "p99": pct(0.99), "open_n": len(lat), "rps": rps, "bad": bad,
                  "envoy_us": (e1 - e0) * 1e6 / n, "rls_us": (s1 - s0) * 1e6 / n,
                  "redis_us": (r1 - r0) * 1e6 / n}))
PY
      echo "$store run $run $which done" >&2
    done
  done
  kill "$FRONT" "$TG_PID" "$LIM_PID"; wait "$FRONT" "$TG_PID" "$LIM_PID" 2>/dev/null || true
done

python3 - "$RESULTS" "$RUNS" "$DURATION" "$RATE" "$PROFILE" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"Medians of {sys.argv[2]} rounds of {sys.argv[3]} per listener and store (listeners "
      f"alternating within a round); open loop at {sys.argv[4]} requests/s; tollgate's "
      f"`{sys.argv[5]}` build; one front Envoy (--concurrency 1).\n")
print("| store | filter asks | open p50 ms | open p99 ms | added p99 ms | closed req/s | "
      "Envoy µs/req | RLS µs/req | Redis µs/req | failed |")
print("|---|---|---|---|---|---|---|---|---|---|")
for store in ("memory", "redis"):
    base = {r["run"]: r["p99"] for r in rows if r["store"] == store and r["which"] == "off"}
    for which in ("off", "tollgate", "limitador"):
        rs = [r for r in rows if r["store"] == store and r["which"] == which]
        if not rs:
            continue
        added = med([r["p99"] - base[r["run"]] for r in rs]) if which != "off" else 0
        rls = f"{med([r['rls_us'] for r in rs]):.1f}" if which != "off" else "-"
        redis = f"{med([r['redis_us'] for r in rs]):.1f}" if store == "redis" and which != "off" else "-"
        print(f"| {store} | {which} | {med([r['p50'] for r in rs]):.2f} | "
              f"{med([r['p99'] for r in rs]):.2f} | {added:.2f} | {med([r['rps'] for r in rs]):,.0f} | "
              f"{med([r['envoy_us'] for r in rs]):.1f} | {rls} | {redis} | {sum(r['bad'] for r in rs)} |")
PY
