"""Docker launcher: the worker in a container on the pool's engine, with the same interface as ``local``.

A CPU pool runs ``settings.worker_image`` (infra/Dockerfile.cpu), a GPU pool ``settings.worker_gpu_image``
(infra/Dockerfile.gpu) with its GPUs by UUID. Engine calls go through `docker_adaptor`. Every container is
removed: by `wait`/`stop` when the caller gets that far (after its logs are saved to the run directory), and by
the reaper (`docker_reaper`) when the calling process dies first.

A serve worker shares the host's network: with a local engine it binds the spec's (loopback) address, with a
remote one (``pool.engine: ssh://gpu-1``) it binds every interface of that host and the URL names the host.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from typing import Any

from oltunes.config import get_settings
from oltunes.errors import MissingDependency, WorkerError
from oltunes.launchers import docker_adaptor, docker_reaper
from oltunes.launchers.base import Handle, Launcher, WorkerResult, WorkerSpec, free_port, read_report, tail_file
from oltunes.launchers.local import worker_argv
from oltunes.telemetry import Monitor
from oltunes.types import Pool

_reapers: dict[str | None, subprocess.Popen] = {}  # one per engine, for this process's containers


class DockerLauncher(Launcher, name="docker"):
    """Run workers as containers (default cluster: this machine's CPU pools; GPU hosts: infra/inventory.gpu.yaml).

    Parameters
    ----------
    image
        Image for every pool (default: ``settings.worker_image`` / ``settings.worker_gpu_image`` by pool kind).
    engine
        Engine endpoint for pools that name none (default ``DOCKER_HOST``).
    threads
        Cores (and ONNX Runtime threads) for pools without a CPU set.
    memory_mb
        Memory limit of each container.
    user
        ``uid:gid`` inside the container (default: the caller's, so outputs belong to the caller; a root caller
        gets root without capabilities, which cannot read other users' files).
    """

    def __init__(
        self,
        image: str | None = None,
        engine: str | None = None,
        threads: int = 2,
        memory_mb: int = 4096,
        user: str | None = None,
        sample_interval_s: float = 0.5,
    ):
        self.image = image
        self.engine = engine
        self.threads = threads
        self.memory_mb = memory_mb
        self.user = user or f"{os.getuid()}:{os.getgid()}"
        self.sample_interval_s = sample_interval_s
        self._clients: dict[str | None, Any] = {}

    def _client(self, endpoint: str | None) -> Any:
        if endpoint not in self._clients:
            self._clients[endpoint] = docker_adaptor.connect(endpoint)
        reaper = _reapers.get(endpoint)
        if reaper is None or reaper.poll() is not None:
            _reapers[endpoint] = docker_reaper.spawn(os.getpid(), docker_adaptor.OWNER, endpoint)
        return self._clients[endpoint]

    def image_for(self, spec: WorkerSpec) -> str:
        return self.pool_image(spec.pool)

    def pool_image(self, pool: Pool) -> str:
        s = get_settings()
        return self.image or (s.worker_gpu_image if pool.device_ids else s.worker_image)

    def engine_problems(self, pools: Iterable[Pool]) -> dict[str, str]:
        """Why each pool that cannot start a container cannot (its engine does not answer, lacks the pool's image or
        the NVIDIA runtime), by pool name; asked before any decision, so a missing engine fails fast and clearly."""
        problems: dict[str, str] = {}
        clients: dict[str | None, Any] = {}
        try:
            for pool in pools:
                endpoint = docker_adaptor.endpoint_of(pool, self.engine)
                try:
                    if endpoint not in clients:
                        clients[endpoint] = docker_adaptor.connect(endpoint, timeout_s=10)
                    docker_adaptor.require_gpu_runtime(clients[endpoint], pool)
                    docker_adaptor.require_image(clients[endpoint], self.pool_image(pool))
                except MissingDependency as e:
                    problems[pool.name] = str(e)
        finally:
            for c in clients.values():
                c.close()
        return problems

    def start(self, spec: WorkerSpec) -> Handle:
        endpoint = docker_adaptor.endpoint_of(spec.pool, self.engine)
        client = self._client(endpoint)
        image = self.image_for(spec)
        docker_adaptor.require_gpu_runtime(client, spec.pool)  # what the pool needs of the engine, then the image
        docker_adaptor.require_image(client, image)
        remote_host = docker_adaptor.engine_host(endpoint)
        cores = len(spec.pool.cpu_set) if spec.pool.cpu_set else self.threads
        port = None
        if spec.mode == "serve":
            port = spec.port or free_port(spec.host)
            spec = spec.model_copy(update={"host": "0.0.0.0" if remote_host else spec.host})
        args = worker_argv(spec, threads=cores, port=port, command=[])
        for d in (spec.output_dir, spec.run_dir):
            if d is not None:
                d.mkdir(parents=True, exist_ok=True)
        spec.report_path.unlink(missing_ok=True)  # a stale report must never pass for this run's
        config = docker_adaptor.container_config(
            spec, args, image=image, cores=cores, memory_mb=self.memory_mb, port=port, user=self.user,
            endpoint=endpoint,
        )  # fmt: skip
        container = docker_adaptor.run(client, config)
        container.reload()
        pid = container.attrs["State"]["Pid"] if docker_adaptor.is_local(endpoint) else None
        monitor = Monitor(
            pid=pid or None,
            cores=cores,
            gpu_device_ids=spec.pool.device_ids,
            gpu=bool(spec.pool.device_ids),
            watts_per_core=get_settings().cpu_watts_per_core,
            interval_s=self.sample_interval_s,
        )
        try:
            monitor.start()
        except Exception:
            docker_adaptor.remove(container)
            raise
        url = f"http://{remote_host or spec.host}:{port}" if port else None
        return Handle(spec=spec, launcher=self.name, pid=pid, url=url, state={"container": container, "monitor": monitor})

    # -- ending a container: logs saved, telemetry closed, container removed ---------------------------------
    def _finish(self, handle: Handle, returncode: int) -> WorkerResult:
        if handle.result is not None:
            return handle.result
        c = handle.state["container"]
        try:
            logs = c.logs().decode(errors="replace")
        except Exception:  # already removed (e.g. by the reaper): keep whatever was saved
            logs = ""
        if logs:
            with open(handle.spec.log_path, "a") as f:
                f.write(logs)
        docker_adaptor.remove(c)
        report = read_report(handle.spec) if handle.spec.mode == "batch" else {}
        cpu_time = report.get("cpu_time_s")  # the worker's own exact figure beats sampling
        telemetry = handle.state["monitor"].stop(cpu_time_s=float(cpu_time) if cpu_time is not None else None)
        handle.result = WorkerResult(returncode=returncode, report=report, telemetry=telemetry)
        return handle.result

    def _exit_code(self, handle: Handle, timeout_s: float | None) -> int:
        c = handle.state["container"]
        return int(c.wait(timeout=timeout_s)["StatusCode"])

    def wait(self, handle: Handle, timeout_s: float | None = None) -> WorkerResult:
        try:
            rc = self._exit_code(handle, timeout_s)
        except BaseException as e:  # timeout, engine error, or the caller was cancelled: never leave it running
            rc = self.stop(handle, grace_s=2.0)
            if isinstance(e, Exception):
                raise WorkerError(
                    f"container worker ({handle.spec.mode}, {handle.spec.candidate.key}) did not finish in "
                    f"{timeout_s} s and was stopped (exit {rc}); log tail:\n{self.logs(handle, 20)}"
                ) from e
            raise
        return self.checked(handle, self._finish(handle, rc))

    def describe(self, handle: Handle) -> str:
        return f"container ({handle.spec.mode}, {handle.spec.candidate.key})"

    def alive(self, handle: Handle) -> bool:
        if handle.result is not None:
            return False
        try:
            c = handle.state["container"]
            c.reload()
            return c.status in ("created", "running")
        except Exception:  # removed behind our back
            return False

    def stop(self, handle: Handle, grace_s: float = 10.0) -> int | None:
        if handle.result is not None:
            return handle.result.returncode
        c = handle.state["container"]
        try:
            c.stop(timeout=max(int(grace_s), 0))  # SIGTERM through the init process, SIGKILL after grace_s
            rc = self._exit_code(handle, grace_s + 30)
        except Exception:  # gone already, or the engine failed: it is removed below either way
            rc = -1
        return self._finish(handle, rc).returncode

    def logs(self, handle: Handle, tail: int = 50) -> str:
        if handle.result is None:
            try:
                return handle.state["container"].logs(tail=tail).decode(errors="replace")
            except Exception:
                pass
        return tail_file(handle.spec.log_path, tail)
