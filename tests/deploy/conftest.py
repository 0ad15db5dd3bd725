"""One real `prefect server start` on loopback with `infra/deploy.sh` run against it, shared by the deployment
tests of a session (starting and deploying costs minutes), plus the few REST calls and process helpers they use."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from oltunes.netaddr import free_port

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


class Api:
    """The few REST calls the tests need (Prefect's documented API, no client state)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        """One call, retried for up to 60 s while the server answers 503 (its SQLite database busy under load;
        Prefect's own client retries these too)."""
        deadline = time.monotonic() + 60
        while True:
            r = self.http.request(method, path, json=body)
            if r.status_code != 503 or time.monotonic() > deadline:
                return r.raise_for_status().json()
            time.sleep(1)

    def deployment(self, flow: str, name: str) -> dict:
        return self.call("GET", f"/deployments/name/{flow}/{name}")

    def runs(self, deployment_id: str) -> list[dict]:
        body = {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"}
        return self.call("POST", "/flow_runs/filter", body)

    def run(self, run_id: str) -> dict:
        return self.call("GET", f"/flow_runs/{run_id}")

    def create_run(self, deployment_id: str, body: dict) -> str:
        return self.call("POST", f"/deployments/{deployment_id}/create_flow_run", body)["id"]


def wait_for(what: str, check, timeout_s: float, every_s: float = 2.0, diagnose=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g}s{diagnose()}")
        time.sleep(every_s)


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout_s: float = 60) -> None:
    """End one process this test started, by its own handle: `sig` first (SIGINT for a Prefect worker, which
    ignores SIGTERM), SIGKILL if it outlives `timeout_s`."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class Deployed:
    """A Prefect server with the project deployed (`infra/deploy.sh`): its API, environment and log folder."""

    repo_root: Path
    home: Path
    env: dict[str, str]
    api_url: str

    @property
    def api(self) -> Api:
        return Api(self.api_url)

    def start(self, name: str, *cmd: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """A process of the test's own (its log under ``home/logs/<name>.log``); stop it with `stop`."""
        out = open(self.home / "logs" / f"{name}.log", "w")
        return subprocess.Popen(cmd, cwd=self.repo_root, env={**self.env, **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def cli(self, *cmd: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run(cmd, cwd=self.repo_root, env=self.env, capture_output=True, text=True, timeout=timeout_s)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return r

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((self.home / "logs").glob("*.log")))


@pytest.fixture(scope="session")
def deployed(repo_root, built_zoo, tmp_path_factory):
    """`prefect server start` on a free loopback port, then `infra/deploy.sh` (pools, zoo, batch input, `prefect
    deploy --all`). Tests start and stop their own workers; the server stops after the session's last one."""
    tmp = tmp_path_factory.mktemp("deployed")
    home = tmp / "home"
    shutil.copytree(built_zoo, home / "zoo")
    (home / "logs").mkdir(parents=True)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ, "OLTUNES_HOME": str(home), "PREFECT_HOME": str(tmp / "prefect"), "PREFECT_API_URL": api_url,
        "OLTUNES_PREFECT_PORT": str(port), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",  # the scheduler looks every 5 s (default 60)
        "PREFECT_WORKER_QUERY_SECONDS": "2",  # workers poll every 2 s (default 10)
        "MLFLOW_DISABLE_TELEMETRY": "true", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
        # the server streams run logs, so `prefect deployment run --watch` prints them (as docs/production.md says)
        "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true", "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true",
    }  # fmt: skip
    for var in ("OLTUNES_TUNER_URL", "OLTUNES_MLFLOW_TRACKING_URI"):
        env.pop(var, None)
    d = Deployed(repo_root=repo_root, home=home, env=env, api_url=api_url)
    server = d.start("prefect-server", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port))
    try:
        r = subprocess.run(["bash", "infra/deploy.sh"], cwd=repo_root, env=env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + d.logs()
        yield d
    finally:
        stop(server)
