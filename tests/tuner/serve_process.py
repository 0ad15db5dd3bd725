"""A real `oltunes tuner serve` process on a free loopback port, for tests that need a whole process (SIGKILL,
SIGINT, oversize bodies through the real uvicorn)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from oltunes.netaddr import free_port
from tests.tuner.variants import make_variants

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class ServeProcess:
    """``oltunes tuner serve --state <dir>/state.json`` with a token; `start` waits for /v1/health."""

    def __init__(self, workdir: Path, persist_every_s: float = 3600.0):
        self.workdir = workdir
        self.state = workdir / "state.json"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        variants = workdir / "variants.json"
        variants.write_text(json.dumps([v.model_dump(mode="json") for v in make_variants()]))
        self.env = {**os.environ, "OLTUNES_HOME": str(workdir / "home"), "OLTUNES_TUNER_TOKEN": TOKEN}
        self.cmd = [sys.executable, "-c", "from oltunes.cli import app; app()", "tuner", "serve",
                    "--port", str(self.port), "--state", str(self.state), "--variants", str(variants),
                    "--persist-every", str(persist_every_s), "--log-level", "warning"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServeProcess:
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"tuner serve did not come up: {self.proc.communicate()[0]}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Ctrl-C: the service saves its state and exits 0."""
        self._end(signal.SIGINT)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        self._end(signal.SIGKILL)

    def _end(self, sig: int) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(sig)
        try:
            rc = proc.wait(timeout=30)
            if sig == signal.SIGINT:
                assert rc == 0, proc.communicate()[0]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.kill()
