"""Adaptor around the ``docker`` SDK: the only module that imports it (lazily).

It builds what a GPU worker container needs — GPUs by UUID through
``DeviceRequest(device_ids=[...], capabilities=[["gpu"]])`` (as Triton Model Analyzer's ``server_docker.py``),
the pool's CPU set, bind mounts for the model, input, output and run directory, the serve port — and refuses with
`MissingDependency` when no Docker engine is reachable.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from oltunes.errors import MissingDependency
from oltunes.launchers.base import WorkerSpec
from oltunes.types import Pool

DEFAULT_IMAGE = "oltunes-worker:latest"  # built from infra/Dockerfile.worker


def _docker() -> Any:
    try:
        return importlib.import_module("docker")
    except ImportError as e:
        raise MissingDependency("the Docker SDK is not installed: pip install docker") from e


def device_requests(pool: Pool) -> list[Any]:
    """GPU requests for a pool: its GPUs by UUID; none for CPU pools."""
    if not pool.device_ids:
        return []
    types = importlib.import_module("docker.types")
    return [types.DeviceRequest(device_ids=list(pool.device_ids), capabilities=[["gpu"]])]


def run_kwargs(spec: WorkerSpec, argv: list[str], image: str = DEFAULT_IMAGE, port: int | None = None) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.run(...)``: paths are mounted at the same place inside."""
    volumes: dict[str, dict[str, str]] = {}

    def mount(path: Path | None, mode: str) -> None:
        if path is not None:
            volumes[str(Path(path).resolve())] = {"bind": str(Path(path).resolve()), "mode": mode}

    model = spec.candidate.variant.path
    mount(Path(model).parent if model else None, "ro")
    mount(spec.input_path.parent if spec.input_path else None, "ro")
    mount(spec.output_dir, "rw")
    mount(spec.run_dir, "rw")
    kw: dict[str, Any] = {
        "image": image,
        "command": argv,
        "detach": True,
        "volumes": volumes,
        "device_requests": device_requests(spec.pool),
        "labels": {"oltunes.job_id": spec.job.job_id, "oltunes.pool": spec.pool.name},
    }
    if spec.pool.cpu_set:
        kw["cpuset_cpus"] = ",".join(map(str, spec.pool.cpu_set))
    if port is not None:
        kw["ports"] = {f"{port}/tcp": (spec.host, port)}
    return kw


def engine(timeout_s: float = 5.0) -> Any:
    """A connected Docker client, or `MissingDependency` saying what to do."""
    docker = _docker()
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except Exception as e:  # DockerException, requests errors, FileNotFoundError on the socket path
        raise MissingDependency(
            f"no Docker engine is reachable ({type(e).__name__}: {e}); start Docker (and the NVIDIA container "
            "toolkit for GPU pools) or run with launcher='local'"
        ) from e
    return client
