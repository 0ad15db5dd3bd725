"""Docker launcher seam: the worker in a GPU container (production). Engine calls go through `docker_adaptor`.

The full Docker path (image build, GPU runtime checks) is its own issue; this class starts, waits for, stops and
reads the logs of one container, and refuses clearly on a machine without an engine.
"""

from __future__ import annotations

import time

from oltunes.errors import WorkerError
from oltunes.launchers import docker_adaptor
from oltunes.launchers.base import Handle, Launcher, WorkerResult, WorkerSpec, free_port, read_report
from oltunes.launchers.local import worker_argv


class DockerLauncher(Launcher, name="docker"):
    def __init__(self, image: str = docker_adaptor.DEFAULT_IMAGE, threads: int = 4):
        self.image = image
        self.threads = threads

    def start(self, spec: WorkerSpec) -> Handle:
        client = docker_adaptor.engine()
        port = (spec.port or free_port(spec.host)) if spec.mode == "serve" else None
        threads = len(spec.pool.cpu_set) if spec.pool.cpu_set else self.threads
        argv = worker_argv(spec, threads=threads, port=port, command=["oltunes", "worker"])
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        container = client.containers.run(**docker_adaptor.run_kwargs(spec, argv, self.image, port))
        url = f"http://{spec.host}:{port}" if port else None
        return Handle(spec=spec, launcher=self.name, url=url, state={"container": container})

    def wait(self, handle: Handle, timeout_s: float | None = None) -> WorkerResult:
        c = handle.state["container"]
        try:
            rc = int(c.wait(timeout=timeout_s)["StatusCode"])
        except Exception as e:
            c.kill()
            raise WorkerError(f"container {c.id[:12]} did not finish in {timeout_s} s: {e}") from e
        if rc != 0:
            raise WorkerError(f"container {c.id[:12]} exited with {rc}; logs:\n{self.logs(handle, 20)}")
        handle.result = WorkerResult(returncode=rc, report=read_report(handle.spec))
        return handle.result

    def ready(self, handle: Handle, timeout_s: float = 60.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{handle.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise WorkerError(f"container worker at {handle.url} not healthy after {timeout_s:.0f} s")

    def alive(self, handle: Handle) -> bool:
        c = handle.state["container"]
        c.reload()
        return c.status == "running"

    def stop(self, handle: Handle, grace_s: float = 10.0) -> int | None:
        c = handle.state["container"]
        c.stop(timeout=int(grace_s))
        return int(c.wait(timeout=grace_s)["StatusCode"])

    def logs(self, handle: Handle, tail: int = 50) -> str:
        return handle.state["container"].logs(tail=tail).decode(errors="replace")
