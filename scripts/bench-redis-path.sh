#!/usr/bin/env bash
# Where the Redis path's CPU goes beyond the transport (issue 62): tollgate under valgrind's
# callgrind (instructions, which do not depend on the box's load) on scripts/bench.sh's
# scenario (a) (1 descriptor over 10,000 keys, closed loop, examples/bench.yaml), once with
# `serve --disabled` (the transport's floor: every request OK without a store) and once on a
# single Redis, one serving thread each. Prints instructions per decision by where they ran (a
# function's own instructions, grouped by the crate of its source file) for both runs and the
# difference, and the decisions per EVALSHA of the Redis run (a script call carries a batch).
#
#   scripts/bench-redis-path.sh [SECONDS] [TOLLGATE] [CONCURRENCY]
#     SECONDS per run (default 20), TOLLGATE default target/release/tollgate, CONCURRENCY the
#     calls in flight (default 64, over 4 connections as scenario (a)). KEEP=DIR keeps the two
#     callgrind profiles there.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

SECONDS_EACH=${1:-20}
TG=${2:-target/release/tollgate}
CONC=${3:-64}
need valgrind callgrind_annotate python3 curl redis-server redis-cli
BENCH=target/release/tollgate-bench
[ -x "$BENCH" ] || cargo build --release --quiet -p tollgate-bench
[ -x "$TG" ] || cargo build --release --quiet -p tollgate --bin tollgate
WORK=$(mktemp -d /tmp/tollgate-path.XXXXXX)
PIDS=()
trap cleanup EXIT

REDIS=$(free_port)
start_redis "$REDIS"

profile() { # name [serve args...]: the run's decisions in $WORK/name.n, its profile in $WORK/name.txt
  local name=$1; shift
  local grpc http pid
  grpc=$(free_port); http=$(free_port)
  valgrind --tool=callgrind --callgrind-out-file="$WORK/$name.cg" "$TG" serve \
    --config examples/bench.yaml --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
    --serving-threads 1 --log error "$@" 2>"$WORK/$name.valgrind.log" &
  pid=$!; PIDS+=("$pid")
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$REDIS" config resetstat >/dev/null
  "$BENCH" --addr "http://127.0.0.1:$grpc" --domain bench --descriptor 'key={key}' --keys 10000 \
    --concurrency "$CONC" --connections 4 --threads 1 --warmup 0s --duration "${SECONDS_EACH}s" \
    --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["errors"] == 0, r; print(r["requests"])' \
    >"$WORK/$name.n"
  redis-cli -p "$REDIS" info commandstats | tr -d '\r' \
    | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' >"$WORK/$name.evalsha"
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  callgrind_annotate --auto=no --threshold=100 "$WORK/$name.cg" >"$WORK/$name.txt" 2>/dev/null
  # KEEP=DIR keeps the profiles (callgrind_annotate --tree=caller DIR/redis.cg, kcachegrind).
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$WORK/$name.cg" "$KEEP/"; }
}

echo "callgrind: serve --disabled (${SECONDS_EACH}s)..." >&2
profile disabled --disabled
echo "callgrind: a single Redis (${SECONDS_EACH}s)..." >&2
profile redis --redis-url "redis://127.0.0.1:$REDIS" --redis-timeout 1s

python3 - "$WORK" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$TG" "$CONC" <<'PY'
import re, sys
work, rev, tg, conc = sys.argv[1:]
line = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)  (\S.*)$")

TRANSPORT = {"h2", "hyper", "hyper_util", "tonic", "tower", "http", "http_body", "http_body_util", "axum"}

def group(path, fn):
    """Where a function's own instructions are counted: the crate its name (or, for a symbol
    without a Rust path, its source file) belongs to, and tollgate's modules apart."""
    name = re.sub(r"^<+", "", fn)
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", name)
    crate = m.group(1) if m else None
    if crate == "tollgate":
        sub = re.match(r"tollgate::((?:store::redis|store|serve|service|plan|algorithm))\b", name)
        return "tollgate " + (sub.group(1) if sub else "(other)")
    if crate is None:
        if path == "???" and ("mi_" in fn):
            return "mimalloc"
        if "libmimalloc" in path or "mimalloc" in path:
            return "mimalloc"
        if path == "???" or "glibc" in path or "libc" in path or "sysdeps" in path:
            return "libc (memcpy, memset, ...)"
        return "other (no Rust path)"
    if crate in ("core", "alloc", "std"):
        return "rust std"
    if crate in TRANSPORT:
        return "gRPC transport (h2, hyper, tonic, tower, http)"
    if crate in ("libmimalloc_sys", "mimalloc"):
        return "mimalloc"
    if crate == "redis_protocol":
        return "redis-protocol (RESP)"
    return crate

def read(name):
    groups, fns, total = {}, {}, None
    for l in open(f"{work}/{name}.txt"):
        m = line.match(l)
        if not m:
            continue
        n, rest = int(m.group(1).replace(",", "")), m.group(2)
        if rest.startswith("PROGRAM TOTALS"):
            total = n
            continue
        if ":" not in rest:
            continue
        path, fn = rest.split(":", 1)
        fn = fn.split(" [")[0]
        g = group(path, fn)
        groups[g] = groups.get(g, 0) + n
        f = (g, re.sub(r"::h[0-9a-f]{16}$", "", fn))
        fns[f] = fns.get(f, 0) + n
    decisions = int(open(f"{work}/{name}.n").read())
    return total, decisions, groups, fns

d_total, d_n, d, d_fns = read("disabled")
r_total, r_n, r, r_fns = read("redis")
evalsha = open(f"{work}/redis.evalsha").read().strip()
print(f"callgrind, scenario (a) at {conc} in flight, one serving thread ({rev}, {tg}): "
      f"{d_n:,} decisions disabled, {r_n:,} on Redis"
      + (f" in {int(evalsha):,} EVALSHAs ({r_n / int(evalsha):.1f} a call)" if evalsha else ""))
print()
print("| where (own instructions) | `--disabled` per decision | Redis per decision | difference |")
print("|---|---|---|---|")
names = sorted(set(d) | set(r), key=lambda g: -(r.get(g, 0) / r_n))
for g in names:
    a, b = d.get(g, 0) / d_n, r.get(g, 0) / r_n
    if max(a, b) < 100:
        continue
    print(f"| {g} | {a:,.0f} | {b:,.0f} | {b - a:+,.0f} |")
print(f"| **all of the process** | **{d_total / d_n:,.0f}** | **{r_total / r_n:,.0f}** | "
      f"**{(r_total / r_n) - (d_total / d_n):+,.0f}** |")
print()
print("The functions whose own instructions per decision grew most:")
print()
print("| where | function | `--disabled` | Redis | difference |")
print("|---|---|---|---|---|")
diff = {f: r_fns.get(f, 0) / r_n - d_fns.get(f, 0) / d_n for f in set(d_fns) | set(r_fns)}
for (g, fn), x in sorted(diff.items(), key=lambda kv: -kv[1])[:25]:
    short = fn if len(fn) <= 110 else fn[:107] + "..."
    print(f"| {g} | `{short}` | {d_fns.get((g, fn), 0) / d_n:,.0f} | "
          f"{r_fns.get((g, fn), 0) / r_n:,.0f} | {x:+,.0f} |")
print()
print(f"Redis path ÷ floor in instructions per decision: {(d_total / d_n) / (r_total / r_n):.2f}")
PY
