#!/usr/bin/env bash
# The long soak (issue 58): tests/soak for MINUTES minutes, a fault every minute in turn (a
# primary killed, partitioned, paused past the deadline, restarted empty; a config reload; an
# xDS update) under every kind of limit, a global limit across two regions and a real Envoy,
# with two instances on a 3 + 3 Redis Cluster with --redis-wait-replicas 1. It prints a row
# per period (calls, answers, over-admission, reservations, RSS, Redis memory) and fails on a
# broken promise (tests/soak/main.rs says which). CI runs the short form (every fault once,
# 30 s apart) inside `cargo test`. Needs root and iptables (a primary is cut off), redis-server
# and redis-cli, and the Envoy scripts/get-envoy.sh fetches.
#
#   scripts/soak.sh [MINUTES]        # default 60; the table goes to RELIABILITY.md by hand
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

MINUTES=${1:-60}
need redis-server redis-cli iptables
TOLLGATE_SOAK_MINUTES=$MINUTES cargo test --release --test soak -- --nocapture
