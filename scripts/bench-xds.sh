#!/usr/bin/env bash
# xDS propagation (issue 33): the time from the control plane publishing an update to the new
# limit deciding, for configs of 1, 100 and 10,000 descriptors, with decisions in flight; prints
# a Markdown table. The benchmark program is benches/xds_propagation.rs (its header says what
# each column measures): a control plane in its own process, tollgate a child on the memory
# store, `--config-xds` pointed at it.
#
#   scripts/bench-xds.sh [SIZES] [RUNS] [CLIENTS]    # default 1,100,10000 20,20,10 4
#
# RUNS: updates measured per size (one number for all, or one per size). CLIENTS: gRPC clients
# deciding meanwhile, half of them on the probe: in a closed loop, or RATE=N decisions/s in all,
# evenly paced. TOLLGATE_PROFILE=dist measures the container image's build.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

SIZES=${1:-1,100,10000}
RUNS=${2:-20,20,10}
CLIENTS=${3:-4}
RATE=${RATE:-0}

echo "building tollgate ($PROFILE) and the benchmark (release)..." >&2
cargo build --profile "$PROFILE" --quiet -p tollgate --bin tollgate
cargo bench --quiet --bench xds_propagation --no-run
cargo bench --quiet --bench xds_propagation -- --tollgate "target/$PROFILE/tollgate" \
  --sizes "$SIZES" --runs "$RUNS" --clients "$CLIENTS" --rate "$RATE"
