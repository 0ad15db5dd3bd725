#!/usr/bin/env bash
# CI: what the Docker tests need on a Debian host, then a private engine. Prints `export DOCKER_HOST=...`.
#   eval "$(.ci/docker-engine.sh)"; trap 'infra/dockerd.sh stop' EXIT
# docker.io (engine), debootstrap (the CPU image's root filesystem), docker-compose (validating infra/compose.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
if ((${#missing[@]})); then
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
fi
echo "export $(infra/dockerd.sh start)"
