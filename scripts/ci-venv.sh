#!/usr/bin/env bash
# Creates (or reuses) the one Python virtual environment every Python-side check uses:
# target/ci-venv, with the pinned packages of scripts/ci-requirements.txt. It is rebuilt when
# that file changes. Prints nothing on reuse; on success the venv's python is
# target/ci-venv/bin/python.
#
# Usage: scripts/ci-venv.sh            (then: target/ci-venv/bin/python ...)
# Another venv from another file: CI_VENV=dir CI_REQUIREMENTS=file [CI_PIP_ARGS=--no-deps]
# (scripts/check-litellm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CI_VENV:-$PWD/target/ci-venv}
REQ=${CI_REQUIREMENTS:-scripts/ci-requirements.txt}

command -v python3 >/dev/null 2>&1 || { echo "error: python3 is not on the PATH" >&2; exit 1; }
stamp=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.requirements-sha256" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
echo "creating $VENV from $REQ"
rm -rf "$VENV"
python3 -m venv "$VENV" || { echo "error: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ${CI_PIP_ARGS:-} -r "$REQ"
echo "$stamp" >"$VENV/.requirements-sha256"
