#!/usr/bin/env bash
# Error answers per million calls with 0.1.0's Redis deadline and 0.2.0's (issue 58, "Defaults
# that hold on a busy host"): 0.1.0 gave every decision 10 ms of Redis whatever the caller
# (`--redis-timeout 10ms`, then its default); 0.2.0 follows the caller's `grpc-timeout` (less a
# tenth, at least 8 ms) up to `--redis-timeout`, now 1 s, which a caller without one gets whole.
#
#   scripts/bench-busy-host.sh [ROUNDS] [SECONDS]     # defaults 3 and 20
#
# For a Redis on loopback and one 30 ms away (each way, through a delaying proxy this script
# runs), and for callers with no deadline (grpcurl, the Python client with timeout=None) and
# with Envoy's 20 ms (tollgate-bench --grpc-timeout 20ms): a closed loop of 32 calls in flight
# on 10,000 keys against a tollgate with each deadline in turn (`--failure-mode error`, so a
# missed deadline is an UNAVAILABLE answer), ROUNDS times SECONDS each, alternating. Prints one
# Markdown table. Run it beside `scripts/soak.sh` to measure a busy host.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ROUNDS=${1:-3}
SECS=${2:-20}
WORK=$(mktemp -d /tmp/tollgate-busy.XXXXXX)
PIDS=()
trap cleanup EXIT
need redis-server redis-cli python3
build_bins

cat > "$WORK/delay.py" <<'PY'
# A TCP proxy that delays each chunk by DELAY seconds each way, in order.
import asyncio, sys
LISTEN, TARGET, DELAY = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])

async def pump(reader, writer):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    async def send():
        while True:
            at, data = await queue.get()
            if data is None:
                writer.close(); return
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
    sender = asyncio.create_task(send())
    while True:
        data = await reader.read(65536)
        await queue.put((loop.time() + DELAY, data or None))
        if not data:
            break
    await sender

async def handle(r, w):
    tr, tw = await asyncio.open_connection("127.0.0.1", TARGET)
    await asyncio.gather(pump(r, tw), pump(tr, w), return_exceptions=True)

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", LISTEN)
    async with server:
        await server.serve_forever()
asyncio.run(main())
PY

REDIS=$(free_port); start_redis "$REDIS"
FAR=$(free_port)
python3 "$WORK/delay.py" "$FAR" "$REDIS" 0.030 &
PIDS+=($!)
sleep 0.5

# start NAME REDIS_PORT EXTRA...: sets PORT_<NAME>.
start() {
  local name=$1 redis=$2; shift 2
  local grpc http; grpc=$(free_port); http=$(free_port)
  $TG serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
    --log error --redis-url "redis://127.0.0.1:$redis" --redis-key-prefix "busy-$name:" \
    --failure-mode error "$@" &
  PIDS+=($!)
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break; sleep 0.1
  done
  printf -v "PORT_$name" '%s' "$grpc"
}
start near_old "$REDIS" --redis-timeout 10ms
start near_new "$REDIS"
start far_old "$FAR" --redis-timeout 10ms
start far_new "$FAR"

echo "busy-host: $ROUNDS rounds of ${SECS} s per case (load average now: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
for round in $(seq "$ROUNDS"); do
  for where in near far; do
    for caller in none envoy; do
      for default in old new; do
        var="PORT_${where}_${default}"
        extra=()
        [ "$caller" = envoy ] && extra=(--grpc-timeout 20ms)
        $BENCH --addr "http://127.0.0.1:${!var}" --domain bench --descriptor 'key={key}' \
          --keys 10000 --concurrency 32 --connections 4 --duration "${SECS}s" --warmup 0s \
          --timeout 5s --json "${extra[@]}" > "$WORK/$where-$caller-$default-$round.json"
        echo "round $round: $where, caller $caller, $default default done" >&2
      done
    done
  done
done

python3 - "$WORK" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import glob, json, os, sys
work, load = sys.argv[1], sys.argv[2]
rows = {}
for f in glob.glob(os.path.join(work, "*.json")):
    where, caller, default, _ = os.path.basename(f)[:-5].split("-")
    d = json.load(open(f))
    r = rows.setdefault((where, caller, default), {"calls": 0, "errors": 0, "p99": []})
    r["calls"] += d["requests"]
    r["errors"] += d["errors"]
    r["p99"].append(d["p99_us"])
print("| Redis | caller's deadline | Redis deadline | calls | error answers | per million | p99 ms (median of rounds) |")
print("|---|---|---|---|---|---|---|")
names = {"near": "loopback", "far": "30 ms away", "none": "none", "envoy": "20 ms (Envoy)",
         "old": "0.1.0: 10 ms", "new": "0.2.0: the caller's, at most 1 s"}
for key in sorted(rows, key=lambda k: (k[0] != "near", k[1] != "none", k[2] != "old")):
    r = rows[key]
    p99 = sorted(r["p99"])[len(r["p99"]) // 2] / 1000
    per_m = r["errors"] * 1e6 / max(r["calls"], 1)
    print(f"| {names[key[0]]} | {names[key[1]]} | {names[key[2]]} | {r['calls']:,} | {r['errors']:,} | {per_m:,.0f} | {p99:.1f} |")
print(f"\nLoad average at the end: {load}.")
PY
