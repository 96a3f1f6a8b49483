#!/usr/bin/env bash
# Checks the Helm chart in helm/tollgate: helm lint --strict and helm template with helm 4.1 and
# helm 3.17 (value sets that must render and value sets that must be refused), structural
# checks of the rendered objects, Kubernetes OpenAPI schema validation (kubernetes-validate)
# for every version from the chart's kubeVersion floor on, ServiceMonitor CRD checks, NOTES,
# the `helm test` script, `tollgate check-config` on the rendered ConfigMaps, and the chart's
# env against a real `tollgate serve`. All of it is scripts/check_chart.py, run in the CI venv.
#
# No Docker, no cluster, nothing fetched beyond PyPI (helm comes from scripts/get-helm.sh).
# Needs a built tollgate: TOLLGATE_BIN, else target/release/tollgate (cargo build --release or
# cargo test --release makes it). Anything missing is a failure, never a skip.
#
# Usage: scripts/check-chart.sh        (exit status 0 = every check passed)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/ci-venv.sh
PY=${CI_VENV:-$PWD/target/ci-venv}/bin/python
TOOLS=$(bash scripts/get-helm.sh)

TOLLGATE_BIN=${TOLLGATE_BIN:-$PWD/target/release/tollgate}
if [ ! -x "$TOLLGATE_BIN" ]; then
    echo "check-chart: error: no tollgate binary at $TOLLGATE_BIN (cargo build --release, or set TOLLGATE_BIN)" >&2
    exit 1
fi

exec "$PY" scripts/check_chart.py --helm "$TOOLS/helm" --helm3 "$TOOLS/helm3" --tollgate "$TOLLGATE_BIN"
