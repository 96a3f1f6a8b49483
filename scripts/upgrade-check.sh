#!/usr/bin/env bash
# Two releases on one Redis, as a rolling upgrade runs them (docs/operations.md, "Versions and
# upgrades"): builds OLD_REF and the working tree, then runs `upgrade-race` (tollgate-bench)
# on a single Redis and on a 3-primary Redis Cluster: the old release and the new race on
# limits of every kind, the old instance is replaced by the new one mid-window, and every
# limit must admit exactly what one release alone would, with no error answers.
#
#   scripts/upgrade-check.sh OLD_REF     # a git ref; CI passes .ci/previous-release's commit
#
# OLD_REF's binary is cached per commit in target/upgrade/<commit>/tollgate (a second run does
# not build it again). It is built from `git archive` of that commit, in the same target
# directory as the working tree, so the two share every compiled dependency their lock files
# agree on. Needs redis-server and redis-cli on the PATH. Exits non-zero on any difference.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

OLD_REF=${1:?usage: scripts/upgrade-check.sh OLD_REF (a git ref, e.g. \$(tail -1 .ci/previous-release))}
need redis-server redis-cli git cargo python3
ROOT=$PWD
OLD=$(git rev-parse --verify --quiet "$OLD_REF^{commit}") \
  || { echo "error: '$OLD_REF' is not a commit of this repository (a shallow clone? fetch it)" >&2; exit 1; }
CACHE=$ROOT/target/upgrade/$OLD
WORK=$(mktemp -d /tmp/tollgate-upgrade.XXXXXX)
PIDS=()
trap cleanup EXIT

if [ -x "$CACHE/tollgate" ]; then
  echo "upgrade-check: the old release ${OLD:0:12} is cached in $CACHE" >&2
else
  echo "upgrade-check: building the old release ${OLD:0:12} ($OLD_REF)..." >&2
  src=$WORK/old-src
  mkdir -p "$src" "$CACHE"
  git archive "$OLD" | tar -x -C "$src"
  # tar gives every file the commit's time: older than what target/ holds of the working
  # tree, cargo would take the working tree's build script and objects as fresh.
  find "$src" -type f -exec touch {} +
  (cd "$src" && CARGO_TARGET_DIR=$ROOT/target TOLLGATE_COMMIT=${OLD:0:12} \
     cargo build --release --locked --quiet -p tollgate --bin tollgate)
  # The old tree's binary replaced the new one's in target/release: keep it aside.
  mv -f "$ROOT/target/release/tollgate" "$CACHE/tollgate.part"
  mv -f "$CACHE/tollgate.part" "$CACHE/tollgate"
fi
echo "upgrade-check: building the working tree..." >&2
cargo build --release --quiet -p tollgate --bin tollgate -p tollgate-bench --bin upgrade-race
NEW=$ROOT/target/release/tollgate
RACE=$ROOT/target/release/upgrade-race
echo "upgrade-check: old $("$CACHE/tollgate" --version), new $("$NEW" --version)" >&2

status=0
p=$(free_port); start_redis "$p"
"$RACE" --old "$CACHE/tollgate" --new "$NEW" --redis-url "redis://127.0.0.1:$p" \
  --work "$WORK/single" || status=1
start_cluster
"$RACE" --old "$CACHE/tollgate" --new "$NEW" --redis-url "redis-cluster://127.0.0.1:${CLUSTER[0]}" \
  --work "$WORK/cluster" || status=1
if [ "$status" != 0 ]; then
  for log in "$WORK"/*/*.log; do echo "== $log"; tail -n 20 "$log"; done >&2
  echo "upgrade-check: FAILED: the releases ${OLD:0:12} and the working tree do not keep one count" >&2
  exit 1
fi
echo "upgrade-check: passed (${OLD:0:12} beside the working tree, on a Redis and a Cluster)" >&2
