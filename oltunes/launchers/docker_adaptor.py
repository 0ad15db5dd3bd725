"""Adaptor around the ``docker`` SDK: the only module that imports it (lazily).

It connects to a pool's engine, checks what a container needs before starting one (the image, the NVIDIA runtime
for GPU pools) and builds the container's configuration:

- GPUs by UUID: ``DeviceRequest(device_ids=[...], capabilities=[["gpu"]])`` plus ``CUDA_VISIBLE_DEVICES``;
- the pool's CPU set, a CPU quota (``nano_cpus``) and a memory limit;
- serve containers share the host's network (the worker binds the address the flow connects to); batch
  containers have no network at all; never a bridge, so no iptables are needed;
- bind mounts at the same path inside: model and input read-only, outputs and the run directory read-write;
  the Docker socket is never mounted;
- a read-only root filesystem, no capabilities, no new privileges, an init process that forwards signals;
- labels naming the job, the decision, the pool and the owning process (`OWNER`, used by the reaper).

Every engine failure becomes `MissingDependency` or `WorkerError` saying what to do.
"""

from __future__ import annotations

import importlib
import os
import uuid
from pathlib import Path
from typing import Any

from oltunes.errors import ConfigError, MissingDependency, WorkerError
from oltunes.launchers.base import WorkerSpec
from oltunes.types import Pool

# This process's containers carry ``oltunes.owner=OWNER``: the reaper removes them when this process ends.
OWNER = uuid.uuid4().hex
BUILD_HINT = "build it: infra/build-cpu-image.sh (CPU) or docker build -f infra/Dockerfile.gpu -t <tag> . (GPU)"


def _docker() -> Any:
    try:
        return importlib.import_module("docker")
    except ImportError as e:
        raise MissingDependency("the Docker SDK is not installed: pip install 'oltunes[flows]'") from e


def endpoint_of(pool: Pool, default: str | None = None) -> str | None:
    """The pool's engine, else the launcher's, else None (= ``DOCKER_HOST`` or the default socket)."""
    return pool.engine or default


def is_local(endpoint: str | None) -> bool:
    """True when the engine runs on this host (its containers' processes are visible here)."""
    return (endpoint or os.environ.get("DOCKER_HOST") or "unix://").startswith("unix://")


def engine_host(endpoint: str | None) -> str | None:
    """The host name of a remote engine (``ssh://user@gpu-1`` -> ``gpu-1``); None for a local one."""
    if is_local(endpoint):
        return None
    rest = (endpoint or os.environ["DOCKER_HOST"]).split("://", 1)[1]
    return rest.rsplit("@", 1)[-1].split(":", 1)[0].split("/", 1)[0]


def connect(endpoint: str | None = None, timeout_s: float = 10.0) -> Any:
    """A connected client for `endpoint` (None: ``DOCKER_HOST``), or `MissingDependency` saying what to do."""
    docker = _docker()
    where = endpoint or os.environ.get("DOCKER_HOST") or "the default socket (/var/run/docker.sock)"
    try:
        if endpoint:
            client = docker.DockerClient(base_url=endpoint, timeout=int(timeout_s), use_ssh_client=True)
        else:
            client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except Exception as e:  # DockerException, requests errors, FileNotFoundError on the socket path
        raise MissingDependency(
            f"no Docker engine is reachable at {where} ({type(e).__name__}); start it (systemctl start docker, "
            "or infra/dockerd.sh start), then name it in the pool's `engine:` in the inventory or as DOCKER_HOST in "
            "the deployment's job variables (prefect.yaml `job_variables: env:`), or run with launcher='local'"
        ) from e
    return client


def require_image(client: Any, image: str) -> None:
    try:
        client.images.get(image)
    except _docker().errors.ImageNotFound:
        raise MissingDependency(f"image {image} is not in the engine at {client.api.base_url}; {BUILD_HINT}") from None


def require_gpu_runtime(client: Any, pool: Pool) -> None:
    """A GPU pool needs the NVIDIA container runtime; refuse before starting rather than fall back to CPU."""
    if not pool.device_ids:
        return
    runtimes = sorted(client.info().get("Runtimes") or {})
    if "nvidia" not in runtimes:
        raise MissingDependency(
            f"pool {pool.name} asks for GPUs {list(pool.device_ids)} but the engine at {client.api.base_url} has "
            f"no NVIDIA runtime (runtimes: {', '.join(runtimes) or 'none'}); install the NVIDIA Container Toolkit "
            "(nvidia-ctk runtime configure --runtime=docker, then restart dockerd) or use a CPU pool"
        )


def device_requests(pool: Pool) -> list[Any]:
    """GPU requests for a pool: its GPUs by UUID; none for CPU pools; a GPU pool that names none is refused."""
    if not pool.device_ids:
        if pool.accelerator.name != "cpu":
            raise ConfigError(
                f"pool {pool.name}: a {pool.accelerator.name} pool needs device_ids (GPU UUIDs from nvidia-smi -L) "
                "in its inventory to run in Docker (see infra/inventory.gpu.yaml)"
            )
        return []
    types = importlib.import_module("docker.types")
    return [types.DeviceRequest(device_ids=list(pool.device_ids), capabilities=[["gpu"]])]


def engine_socket(endpoint: str | None) -> Path | None:
    url = endpoint or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return Path(url.removeprefix("unix://")).resolve() if url.startswith("unix://") else None


def mounts(spec: WorkerSpec, endpoint: str | None = None) -> dict[str, dict[str, str]]:
    """Bind mounts, each at its own path inside: model and input read-only, outputs and run directory read-write.
    The source is the resolved host directory; the target is the path as the worker's arguments name it, so a path
    through a symbolic link (a home or a zoo linked from elsewhere) is found inside too."""
    wanted: list[tuple[Path | None, str]] = [
        (Path(spec.candidate.variant.path).parent if spec.candidate.variant.path else None, "ro"),
        (spec.input_path.parent if spec.input_path else None, "ro"),
        (spec.output_dir, "rw"),
        (spec.run_dir, "rw"),
    ]
    socket = engine_socket(endpoint)
    volumes: dict[str, dict[str, str]] = {}
    for path, mode in wanted:
        if path is None:
            continue
        host = str(Path(path).resolve())
        if socket is not None and (socket == Path(host) or Path(host) in socket.parents):
            raise ConfigError(f"{host}: would expose the Docker socket {socket} to the worker; use another directory")
        if volumes.get(host, {}).get("mode") != "rw":  # the same directory for input and output: writable
            volumes[host] = {"bind": str(Path(path).absolute()), "mode": mode}
    return volumes


def container_config(
    spec: WorkerSpec,
    args: list[str],
    *,
    image: str,
    cores: int,
    memory_mb: int,
    port: int | None = None,
    user: str,
    endpoint: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.run(...)``; `args` follow the image's ``oltunes worker`` ENTRYPOINT."""
    env = {"OLTUNES_HOME": "/tmp/oltunes"}
    if spec.pool.device_ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.pool.device_ids)
    if port is not None:
        env["OLTUNES_WORKER_PORT"] = str(port)  # the image's HEALTHCHECK probes it
    kw: dict[str, Any] = {
        "image": image,
        "command": args,
        "detach": True,
        "init": True,
        "user": user,
        "environment": env,
        "volumes": mounts(spec, endpoint),
        "device_requests": device_requests(spec.pool),
        "network_mode": "host" if spec.mode == "serve" else "none",
        "nano_cpus": int(cores * 1e9),
        "mem_limit": f"{memory_mb}m",
        "pids_limit": 1024,
        "read_only": True,
        "tmpfs": {"/tmp": "rw,size=256m"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": {
            "oltunes.job_id": spec.job.job_id,
            "oltunes.decision_id": spec.decision_id or "",
            "oltunes.pool": spec.pool.name,
            "oltunes.mode": spec.mode,
            "oltunes.owner": OWNER,
        },
    }
    if spec.mode == "batch":
        kw["healthcheck"] = {"test": ["NONE"]}  # nothing listens: no health to check
    if spec.pool.cpu_set:
        kw["cpuset_cpus"] = ",".join(map(str, spec.pool.cpu_set))
    return kw


def run(client: Any, config: dict[str, Any]) -> Any:
    """Start a container; engine refusals become errors that say what to do."""
    docker = _docker()
    try:
        return client.containers.run(**config)
    except docker.errors.ImageNotFound:
        raise MissingDependency(f"image {config['image']} is not in the engine; {BUILD_HINT}") from None
    except docker.errors.APIError as e:
        msg = str(e.explanation or e)
        if "device driver" in msg or "nvidia" in msg.lower():
            raise MissingDependency(
                f"the engine cannot give GPUs to the container ({msg}); install the NVIDIA Container Toolkit"
            ) from e
        raise WorkerError(f"the engine refused to start the worker container: {msg}") from e


def remove(container: Any) -> None:
    """Remove a container whatever its state; already gone is fine."""
    try:
        container.remove(force=True)
    except _docker().errors.NotFound:
        pass


def remove_owned(client: Any, owner: str) -> int:
    """Remove every container `owner` started; returns how many."""
    found = client.containers.list(all=True, filters={"label": f"oltunes.owner={owner}"})
    for c in found:
        remove(c)
    return len(found)
