"""A real Docker engine and the CPU worker image for tests, or a skip that says why (a failure when ``CI=true``).

The engine is the one ``DOCKER_HOST`` names when it answers; otherwise, as root, ``infra/dockerd.sh`` starts a
private one (installing Debian's docker.io when missing) and `stop` ends it by PID at the end of the session.
The image comes from ``infra/build-cpu-image.sh`` (no registry; cached, so a session pays it at most once).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

from oltunes.config import REPO_ROOT

DOCKERD = REPO_ROOT / "infra" / "dockerd.sh"
BUILD = REPO_ROOT / "infra" / "build-cpu-image.sh"


def unavailable(reason: str) -> None:
    """Skip, except in CI where everything the suite needs must be there."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def _answers(docker_host: str) -> bool:
    from oltunes.errors import MissingDependency
    from oltunes.launchers import docker_adaptor

    try:
        docker_adaptor.connect(docker_host, timeout_s=5).close()
        return True
    except MissingDependency:
        return False


@dataclass
class Engine:
    docker_host: str
    started: bool  # by this session: stop it at the end

    def stop(self) -> None:
        if self.started:
            subprocess.run([str(DOCKERD), "stop"], check=False, timeout=120)


def start_engine() -> Engine:
    host = os.environ.get("DOCKER_HOST")
    if host and _answers(host):
        return Engine(host, started=False)
    if os.geteuid() != 0:
        unavailable("no Docker engine answers (set DOCKER_HOST, or run as root so infra/dockerd.sh can start one)")
    if shutil.which("dockerd") is None and shutil.which("apt-get") is None:
        unavailable("dockerd is not installed and apt-get is not available to install docker.io")
    status = subprocess.run([str(DOCKERD), "status"], capture_output=True, text=True)
    r = subprocess.run([str(DOCKERD), "start"], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        unavailable(f"infra/dockerd.sh start failed: {r.stderr.strip()[-400:]}")
    host = r.stdout.strip().splitlines()[-1].removeprefix("DOCKER_HOST=")
    return Engine(host, started=status.returncode != 0)


def build_image(docker_host: str) -> str:
    env = {**os.environ, "DOCKER_HOST": docker_host, "PYTHON": sys.executable}
    r = subprocess.run([str(BUILD)], capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        unavailable(f"infra/build-cpu-image.sh failed: {r.stderr.strip()[-800:]}")
    return r.stdout.strip().splitlines()[-1]
