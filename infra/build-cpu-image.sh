#!/usr/bin/env bash
# Build the CPU worker image with no registry:
#   debootstrap (Debian bookworm + python3) -> docker import -> wheelhouse from the host -> infra/Dockerfile.cpu
# Prints the image tag (oltunes-worker-cpu:<content hash>) as the last line of stdout; also tags :latest.
#
# Caching, so a CI run pays each step at most once:
#   - the root filesystem tarball in $OLTUNES_IMAGE_CACHE (default ~/.cache/oltunes-image), keyed by its packages;
#   - the imported base image and the final image in the engine, tagged by content hash: an unchanged tree
#     (same worker wheel contents, same dependency wheels, same Dockerfile) is not rebuilt.
#
# Needs: a reachable engine (DOCKER_HOST; see infra/dockerd.sh), root for debootstrap (installed with apt when
# missing), and PYTHON (default python3) whose pip builds the wheelhouse; dependency versions follow
# constraints.txt when the repository has one, else that interpreter's installed versions.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OLTUNES_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/oltunes-image}
PYTHON=${PYTHON:-python3}
SUITE=bookworm                      # python3 = 3.11, the project's Python
PACKAGES=python3,python3-venv
MIRROR=${DEBIAN_MIRROR:-$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
REPO=oltunes-worker-cpu
log() { echo "[build-cpu-image] $*" >&2; }
mkdir -p "$CACHE"
docker version --format '{{.Server.Version}}' >/dev/null || { log "no Docker engine (start one: infra/dockerd.sh start)"; exit 1; }

# 1. Base image: a minimal Debian root filesystem, imported (no FROM of any registry image).
KEY=$(printf '%s %s' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-12)
BASE=oltunes-base:$SUITE-$KEY
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  TAR=$CACHE/rootfs-$SUITE-$KEY.tar
  if [[ ! -f $TAR ]]; then
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2
    tmp=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    log "debootstrap $SUITE ($PACKAGES) from $MIRROR"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp/root" "$MIRROR" >&2
    rm -rf "$tmp"/root/var/cache/apt/archives/*.deb "$tmp"/root/var/lib/apt/lists/*
    tar -C "$tmp/root" --numeric-owner -cf "$TAR.part" . && mv "$TAR.part" "$TAR"
    rm -rf "$tmp"
  fi
  log "docker import $TAR -> $BASE"
  docker import --change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' --change 'CMD ["python3"]' "$TAR" "$BASE" >/dev/null
fi

# 2. Wheelhouse: the worker wheel (core dependencies only, no extras) and its dependencies' wheels.
CTX=$(mktemp -d "$CACHE/context.XXXXXX")
trap 'rm -rf "$CTX"' EXIT
mkdir "$CTX/wheelhouse"
if [[ -f $ROOT/constraints.txt ]]; then
  cp "$ROOT/constraints.txt" "$CTX/constraints.txt"
else
  "$PYTHON" -m pip freeze --exclude-editable | grep -E '^[A-Za-z0-9_.-]+==' >"$CTX/constraints.txt"
fi
# From a copy of the package sources: setuptools writes build/ and *.egg-info next to what it builds.
mkdir "$CTX/src"
(cd "$ROOT" && cp -r pyproject.toml README.md oltunes flows tasks "$CTX/src/")
find "$CTX/src" -name __pycache__ -prune -exec rm -rf {} +
"$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$CTX/wheelhouse" "$CTX/src" >&2
rm -rf "$CTX/src"
# Binary wheels for the image's interpreter (CPython 3.11, glibc 2.36), whatever Python the host runs.
"$PYTHON" -m pip download -q --dest "$CTX/wheelhouse" --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
  --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any \
  -c "$CTX/constraints.txt" "$CTX"/wheelhouse/oltunes-*.whl >&2

# 3. The image, tagged by what goes into it.
cp "$ROOT/infra/Dockerfile.cpu" "$CTX/Dockerfile"
TAG=$("$PYTHON" - "$CTX" "$BASE" <<'EOF'
import hashlib, sys, zipfile
from pathlib import Path

ctx, base = Path(sys.argv[1]), sys.argv[2]
h = hashlib.sha256(base.encode() + (ctx / "Dockerfile").read_bytes())
for whl in sorted((ctx / "wheelhouse").glob("*.whl")):
    h.update(whl.name.encode())
    if whl.name.startswith("oltunes-"):  # built just now: hash its contents, not its zip timestamps
        with zipfile.ZipFile(whl) as z:
            for name in sorted(z.namelist()):
                h.update(name.encode() + z.read(name))
print(h.hexdigest()[:12])
EOF
)
IMAGE=$REPO:$TAG
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "$IMAGE is up to date"
else
  log "building $IMAGE"
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$BASE" -t "$IMAGE" "$CTX" >&2
  docker image prune -f --filter label=oltunes.stage=build >/dev/null  # the build stage (wheelhouse + venv)
fi
docker tag "$IMAGE" "$REPO:latest"
for old in $(docker images "$REPO" --format '{{.Tag}}' | grep -v -x -e "$TAG" -e latest); do
  docker rmi "$REPO:$old" >/dev/null 2>&1 || true  # earlier builds (still in use: kept)
done
echo "$IMAGE"
