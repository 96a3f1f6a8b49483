#!/usr/bin/env bash
# Checks tollgate_client.litellm (LiteLLM's proxy on tollgate) against the real LiteLLM proxy,
# in a virtual environment of its own (target/litellm-venv, scripts/litellm-requirements.txt:
# LiteLLM's pins do not fit the CI venv's):
#   1. mypy --strict on tollgate_client/litellm.py, with LiteLLM's own types;
#   2. pytest clients/python/tests/litellm: two proxy replicas (`litellm --num_workers 1`) with
#      the callback, one `tollgate serve`, a local OpenAI-compatible upstream; then the same
#      load on two replicas with LiteLLM's own limits and no callback (the "before").
#
# Needs: python3 (with venv), redis-server on the PATH, and a tollgate binary: TOLLGATE_BIN,
# default target/release/tollgate. The first run downloads the pinned packages (~1-2 min);
# later runs reuse the venv until the requirements file changes.
#
# Usage: scripts/check-litellm.sh [pytest args...]      (exit status 0 = all passed)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PKG=$ROOT/clients/python
export TOLLGATE_BIN=${TOLLGATE_BIN:-$ROOT/target/release/tollgate}
VENV=${LITELLM_VENV:-$ROOT/target/litellm-venv}

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ -x "$TOLLGATE_BIN" ] || die "no tollgate binary at $TOLLGATE_BIN (build it: cargo build --release, or set TOLLGATE_BIN)"
command -v redis-server >/dev/null 2>&1 || die "redis-server is not on the PATH; the tests start their own (Debian: apt-get install redis-server)"

step "virtual environment $VENV (scripts/litellm-requirements.txt)"
CI_VENV=$VENV CI_REQUIREMENTS=scripts/litellm-requirements.txt CI_PIP_ARGS=--no-deps bash scripts/ci-venv.sh
PY=$VENV/bin/python
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$PKG"
"$PY" -m pip check >/dev/null || { "$PY" -m pip check; die "the LiteLLM venv's packages do not fit together"; }

step "mypy --strict tollgate_client/litellm.py (with LiteLLM's types)"
(cd "$PKG" && "$PY" -m mypy --cache-dir "$ROOT/target/mypy-cache-litellm" tollgate_client/litellm.py)

step "pytest tests/litellm (tollgate: $TOLLGATE_BIN)"
cd "$PKG"
export LITELLM_LOCAL_MODEL_COST_MAP=True   # no download of LiteLLM's cost map
"$PY" -m pytest -p no:cacheprovider -q tests/litellm "$@"
