# Shell helpers the benchmark and soak scripts share (sourced, not run).

# A free loopback port whose +10000 is free too (a Redis Cluster node's bus port).
free_port() {
  python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p + 10000 > 65535:
        continue
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 10000)); t.close(); print(p); break
    except OSError:
        t.close()
PY
}

# CPU seconds (user+system) process $1 has used so far.
cpu_s() {
  python3 - "$1" <<'PY'
import os, sys
f = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()
print((int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))
PY
}

# Stops every process in PIDS (a paused one is continued first) and removes WORK. Scripts set
# both, then `trap cleanup EXIT`.
cleanup() {
  for pid in "${PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

# Starts redis-server on port $1 (more args after it) under $WORK, adds it to PIDS, waits for it.
start_redis() {
  local port=$1; shift
  mkdir -p "$WORK/r$port"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK/r$port" \
    --logfile "$WORK/r$port/log" "$@" &
  PIDS+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis on $port did not start" >&2; exit 1
}

# Starts a 3-primary Redis Cluster on free ports (start_redis) and waits until it is ok; its
# ports are left in CLUSTER.
start_cluster() {
  CLUSTER=()
  local p
  for _ in 1 2 3; do
    p=$(free_port); start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf"
    CLUSTER+=("$p")
  done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CLUSTER[@]}") --cluster-yes >/dev/null
  for p in "${CLUSTER[@]}"; do
    for _ in $(seq 100); do redis-cli -p "$p" cluster info | grep -q cluster_state:ok && break; sleep 0.1; done
  done
}

# Fails with a clear message unless every named command is on the PATH.
need() {
  for bin in "$@"; do
    command -v "$bin" >/dev/null || { echo "error: $bin not on PATH" >&2; exit 1; }
  done
}

# Builds what a benchmark runs and sets TG (the tollgate it measures) and BENCH (the load
# generator, always the release build). TOLLGATE_PROFILE is tollgate's Cargo profile: release
# (the default, what `cargo run --release` runs) or dist (the container image's: fat LTO, one
# codegen unit; a 6-7 minute link on 2 cores).
PROFILE=${TOLLGATE_PROFILE:-release}
build_bins() {
  echo "building tollgate ($PROFILE) and tollgate-bench (release)..." >&2
  cargo build --release --quiet --workspace --bins
  [ "$PROFILE" = release ] || cargo build --profile "$PROFILE" --quiet -p tollgate --bin tollgate
  TG=target/$PROFILE/tollgate
  BENCH=target/release/tollgate-bench
}

# start_rls SERVER STORE: starts tollgate or limitador (LIMITADOR) on the memory store or on
# the Redis on port REDIS, with examples/bench.yaml's limits (examples/limitador-bench.yaml for
# limitador; its memory store with --cache 100000) and TG_ARGS added to `tollgate serve`; sets
# PID and PORT once the server answers gRPC (probed with BENCH).
start_rls() {
  PORT=$(free_port); local http; http=$(free_port)
  case "$1/$2" in
    tollgate/memory) $TG serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$PORT" \
                       --http-addr "127.0.0.1:$http" --log error "${TG_ARGS[@]}" & ;;
    tollgate/redis) $TG serve --config examples/bench.yaml --grpc-addr "127.0.0.1:$PORT" \
                      --http-addr "127.0.0.1:$http" --log error \
                      --redis-url "redis://127.0.0.1:$REDIS" --redis-timeout 100ms "${TG_ARGS[@]}" & ;;
    limitador/memory) "$LIMITADOR" -b 127.0.0.1 -p "$PORT" -B 127.0.0.1 -P "$http" \
                        examples/limitador-bench.yaml memory --cache 100000 >"$WORK/limitador.log" 2>&1 & ;;
    limitador/redis) "$LIMITADOR" -b 127.0.0.1 -p "$PORT" -B 127.0.0.1 -P "$http" \
                       examples/limitador-bench.yaml redis "redis://127.0.0.1:$REDIS" \
                       >"$WORK/limitador.log" 2>&1 & ;;
  esac
  PID=$!; PIDS+=("$PID")
  for _ in $(seq 100); do
    $BENCH --addr "http://127.0.0.1:$PORT" --domain bench --descriptor 'key=probe' \
      --duration 100ms --warmup 0s --concurrency 1 --connections 1 --json 2>/dev/null \
      | grep -q '"errors":0,' && return 0
    sleep 0.1
  done
  echo "$1 on $2 did not answer" >&2; exit 1
}

redis_cpu() { # total used_cpu_user+sys over the given ports
  local total=0
  for p in "$@"; do
    total=$(redis-cli -p "$p" info cpu | python3 -c '
import sys
d = dict(l.strip().split(":", 1) for l in sys.stdin if ":" in l)
print(float(d["used_cpu_user"]) + float(d["used_cpu_sys"]) + float(sys.argv[1]))' "$total")
  done
  echo "$total"
}
