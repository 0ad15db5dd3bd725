"""A real `mlflow server` subprocess on a free loopback port (its own process group, so SIGKILL takes all of it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from oltunes.netaddr import free_port

MLFLOW = Path(sys.executable).with_name("mlflow")


class MlflowServer:
    def __init__(self, db: Path, artifacts: Path, log: Path):
        self.db, self.artifacts, self.log = db, artifacts, log
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout_s: float = 180.0) -> str:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [str(MLFLOW), "server", "--backend-store-uri", f"sqlite:///{self.db}",
               "--artifacts-destination", str(self.artifacts), "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]  # fmt: skip
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self.log.read_text()[-2000:]}")
            try:
                # a real API call, not /health: the stores behind it open lazily on first use
                r = httpx.get(f"{self.url}/api/2.0/mlflow/experiments/search", params={"max_results": 1}, timeout=30)
                if r.status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.kill()
        raise RuntimeError(f"mlflow server did not answer within {timeout_s} s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL the server and the uvicorn process it started (the process group this helper created)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group exists while any of its processes lives
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
