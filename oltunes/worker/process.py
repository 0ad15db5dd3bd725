"""Start serve mode as a subprocess and wait until it answers `/health` (what flows and tests use)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from oltunes.errors import WorkerError
from oltunes.lifeline import spawn
from oltunes.netaddr import free_port


class ServeProcess:
    """A running ``oltunes worker serve`` subprocess; use as a context manager or call `stop()`.

    Attributes
    ----------
    url
        ``http://host:port`` of the server.
    pid
        Process id (stop it with `stop()`, which sends SIGTERM so queued requests are answered).
    log_path
        File holding the server's stdout/stderr.
    """

    def __init__(self, proc: subprocess.Popen, host: str, port: int, log_path: Path, own_log: bool = False) -> None:
        self.proc, self.host, self.port, self.log_path = proc, host, port, log_path
        self.url = f"http://{host}:{port}"
        self._own_log = own_log  # a temp log we created: removed after a clean stop

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (graceful: drains the queue), then SIGKILL after `timeout_s`; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._own_log and self.proc.returncode == 0:
            self.log_path.unlink(missing_ok=True)
        return self.proc.returncode

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_process(
    model: Path | str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_batch: int = 32,
    max_delay_ms: float = 5.0,
    threads: int = 1,
    concurrency: int = 1,
    device: str = "auto",
    model_name: str | None = None,
    max_queue_ms: float = 1000.0,
    startup_timeout_s: float = 60.0,
    log_path: Path | str | None = None,
    env: dict[str, str] | None = None,
) -> ServeProcess:
    """Launch serve mode for `model` (a path or a zoo variant name) and return once it is healthy.

    ``port=0`` picks a free port. Raises `WorkerError` (with the server's log tail) if the process exits or
    does not become healthy within `startup_timeout_s`.
    """
    port = port or free_port(host)
    own_log = log_path is None
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="oltunes-serve-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    cmd = [
        sys.executable,
        "-m",
        "oltunes.worker",
        "serve",
        "--model",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--max-batch",
        str(max_batch),
        "--max-delay-ms",
        str(max_delay_ms),
        "--threads",
        str(threads),
        "--concurrency",
        str(concurrency),
        "--device",
        device,
        "--max-queue-ms",
        str(max_queue_ms),
        *(["--name", model_name] if model_name else []),
    ]
    with open(log_path, "wb") as log:
        proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})  # dies with us
    handle = ServeProcess(proc, host, port, log_path, own_log=own_log)
    deadline = time.monotonic() + startup_timeout_s
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise WorkerError(
                    f"worker serve exited with code {proc.returncode} before becoming healthy:\n{handle.log_tail()}"
                )
            try:
                if client.get(f"{handle.url}/health").status_code == 200:
                    return handle
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    handle.stop(timeout_s=5)
    raise WorkerError(f"worker serve did not become healthy within {startup_timeout_s:.0f}s:\n{handle.log_tail()}")
