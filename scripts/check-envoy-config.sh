#!/usr/bin/env bash
# Checks examples/envoy/envoy.yaml and deploy/istio/ against Envoy's own generated protos.
#
# A schema check, not `envoy --mode validate` (no Envoy binary is needed): the YAML is parsed into
# Envoy's messages from the PyPI package xds-protos (envoy.config.bootstrap.v3.Bootstrap for the
# bootstrap; HttpFilter / RateLimit and VirtualHost for the Istio EnvoyFilter's patches), Envoy's
# protoc-gen-validate rules are applied, deprecated fields are refused, and the rate limit
# actions are checked against the tollgate configs they call (examples/ratelimit.yaml and
# deploy/istio/ratelimit-config.yaml). The kustomization must change nothing but the image.
# Details: scripts/check_envoy_config.py.
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
