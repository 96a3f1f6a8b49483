#!/usr/bin/env bash
# Checks what a real Envoy cannot about examples/envoy/envoy.yaml and deploy/istio/: every
# descriptor they send reaches a limit of the tollgate config they call (examples/ratelimit.yaml
# and examples/llm-gateway.yaml, deploy/istio/ratelimit-config.yaml), every limit is sent by some
# route, a slot release is sent when the stream is done and only with an id, no cost sits where
# Envoy never sends it, and the kustomization changes only the image. Envoy itself loads and runs
# these files in the tests (tests/envoy/shipped.rs). Details: scripts/check_envoy_config.py.
#
# Uses the CI virtual environment (scripts/ci-venv.sh, target/ci-venv); a missing package fails.
#
# Usage: scripts/check-envoy-config.sh        (exit status 0 = every check passed)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/ci-venv.sh
PY=${CI_VENV:-$PWD/target/ci-venv}/bin/python
[ -x "$PY" ] || { echo "error: $PY is missing after scripts/ci-venv.sh" >&2; exit 1; }
exec "$PY" scripts/check_envoy_config.py "$PWD"
