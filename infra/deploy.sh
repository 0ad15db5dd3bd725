#!/usr/bin/env bash
# Deploy OLTunes to a Prefect server in one command (run from anywhere, with the project's environment on PATH):
#   1. waits for the API at PREFECT_API_URL;
#   2. creates every work pool prefect.yaml names (process pools; existing ones are kept);
#   3. prepares what the deployments read: the model zoo and the batch input, under OLTUNES_HOME;
#   4. `prefect deploy --all`: each flow run clones OLTUNES_REPO at OLTUNES_COMMIT on its worker host.
#
# Environment (defaults in brackets):
#   PREFECT_API_URL      required, e.g. http://127.0.0.1:4200/api
#   OLTUNES_HOME         [<repo>/.oltunes] runtime state; must be the same path on every worker host
#   OLTUNES_SHARED_DATA  [<repo>/../shared/data] public traces for the streaming deployment
#   OLTUNES_REPO         [this checkout] a Git URL the worker hosts can clone (set it for remote hosts)
#   OLTUNES_COMMIT       [HEAD] the commit the workers run (it must be in OLTUNES_REPO; uncommitted changes are not)
#   OLTUNES_DOCKER_HOST  [unix:///tmp/oltunes-dockerd-<uid>/docker.sock, the engine of infra/dockerd.sh] the engine
#                        the `launcher: docker` deployments' flow runs use (set in their job variables)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PREFECT_API_URL:?set PREFECT_API_URL to the Prefect server API, e.g. http://127.0.0.1:4200/api}"
export OLTUNES_HOME=$(realpath -m "${OLTUNES_HOME:-$PWD/.oltunes}")
export OLTUNES_SHARED_DATA=$(realpath -m "${OLTUNES_SHARED_DATA:-$PWD/../shared/data}")
export OLTUNES_REPO=${OLTUNES_REPO:-$PWD}
export OLTUNES_COMMIT=${OLTUNES_COMMIT:-$(git rev-parse HEAD)}
export OLTUNES_DOCKER_HOST=${OLTUNES_DOCKER_HOST:-unix:///tmp/oltunes-dockerd-$(id -u)/docker.sock}
mkdir -p "$OLTUNES_HOME/flow-runs"
export MLFLOW_DISABLE_TELEMETRY=true PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
log() { echo "[deploy] $*" >&2; }
[[ -z $(git status --porcelain --untracked-files=no) ]] || log "uncommitted changes are not deployed: workers run $OLTUNES_COMMIT"

for _ in $(seq 1 180); do
  python -c "import httpx, sys; sys.exit(httpx.get('$PREFECT_API_URL/health', timeout=2).status_code != 200)" \
    2>/dev/null && break
  sleep 1
done
python -c "import httpx; httpx.get('$PREFECT_API_URL/health', timeout=5).raise_for_status()" \
  || { log "no Prefect API answers at $PREFECT_API_URL (start one: prefect server start)"; exit 1; }

for pool in $(python -c "import yaml; print(*sorted({d['work_pool']['name'] for d in yaml.safe_load(open('prefect.yaml'))['deployments']}))"); do
  if prefect work-pool inspect "$pool" >/dev/null 2>&1; then
    log "work pool $pool exists"
  else
    prefect work-pool create "$pool" --type process >/dev/null && log "work pool $pool created"
  fi
done

log "model zoo in $OLTUNES_HOME/zoo (cached: a re-run only checks it)"
oltunes zoo build >/dev/null
DATASET=$OLTUNES_HOME/data/batch/input.parquet
[[ -f $DATASET ]] || oltunes zoo dataset --output "$DATASET" --n 5000 --family cnn >/dev/null
log "batch input $DATASET"

prefect --no-prompt deploy --all
