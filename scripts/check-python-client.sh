#!/usr/bin/env bash
# Checks the Python client in clients/python, in the one CI virtual environment
# (scripts/ci-venv.sh → target/ci-venv):
#   1. the committed generated code (clients/python/tollgate_client/_pb) equals a fresh
#      regeneration from proto/ with the pinned grpcio-tools;
#   2. the package installs (editable, no dependency resolution: the pins are in the venv);
#   3. mypy --strict on the package;
#   4. pytest against a real `tollgate serve` (memory store and a redis-server of its own).
#
# Needs: python3, redis-server on the PATH, and a tollgate binary: TOLLGATE_BIN, default
# target/release/tollgate (CI builds it with `cargo test --release` / `cargo build --release`).
#
# Usage: scripts/check-python-client.sh [pytest args...]      (exit status 0 = all passed)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PKG=$ROOT/clients/python
export TOLLGATE_BIN=${TOLLGATE_BIN:-$ROOT/target/release/tollgate}

die() { printf 'error: %s\n' "$*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ -x "$TOLLGATE_BIN" ] || die "no tollgate binary at $TOLLGATE_BIN (build it: cargo build --release, or set TOLLGATE_BIN)"
command -v redis-server >/dev/null 2>&1 || die "redis-server is not on the PATH; the tests start their own (Debian: apt-get install redis-server)"

step "virtual environment (scripts/ci-venv.sh)"
bash scripts/ci-venv.sh
PY=${CI_VENV:-$ROOT/target/ci-venv}/bin/python
[ -x "$PY" ] || die "scripts/ci-venv.sh did not produce $PY"

step "generated code is current (clients/python/scripts/regenerate.py --check)"
"$PY" "$PKG/scripts/regenerate.py" --check

step "install tollgate-client into the venv"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$PKG"
"$PY" -m pip check >/dev/null || { "$PY" -m pip check; die "the venv's packages do not fit together"; }

step "mypy --strict"
(cd "$PKG" && "$PY" -m mypy --cache-dir "$ROOT/target/mypy-cache-python-client")

step "pytest (tollgate: $TOLLGATE_BIN)"
cd "$PKG"
# tests/litellm needs LiteLLM's proxy: scripts/check-litellm.sh runs it in a venv of its own.
"$PY" -m pytest -p no:cacheprovider -q --ignore=tests/litellm "$@"
