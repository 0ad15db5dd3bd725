"""A deployed flow with ``launcher=docker``, as docs/production.md tells a user to run it: the engine's address comes
from the deployment's job variables (``OLTUNES_DOCKER_HOST`` at deploy time), never from the Prefect worker's shell.

- No engine there: the run fails before its decision and ``prefect deployment run --watch`` shows why.
- The private engine of ``infra/dockerd.sh`` with the CPU worker image: the run ends Completed with its output
  shards written by worker containers.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.deploy.conftest import stop

pytestmark = pytest.mark.slow


def redeploy(deployed, docker_host: str) -> None:
    """`infra/deploy.sh` again (idempotent) with the engine the docker deployments' job variables carry."""
    env = {**deployed.env, "OLTUNES_DOCKER_HOST": docker_host}
    r = subprocess.run(["bash", "infra/deploy.sh"], cwd=deployed.repo_root, env=env, capture_output=True, text=True,
                       timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def run_watched(deployed, *params: str, timeout_s: float = 1500) -> subprocess.CompletedProcess:
    args = [f"--param={p}" for p in params]
    return subprocess.run(["prefect", "deployment", "run", "batch-inference/batch-docker", *args, "--watch",
                           "--watch-timeout", str(int(timeout_s))], cwd=deployed.repo_root,
                          env={**deployed.env, "COLUMNS": "1000"},  # rich wraps at 80 columns otherwise
                          capture_output=True, text=True, timeout=timeout_s + 120)  # fmt: skip


@pytest.mark.timeout(1800)
def test_docker_deployment_without_an_engine_fails_before_deciding_and_watch_says_why(deployed, tmp_path):
    redeploy(deployed, f"unix://{tmp_path}/no-engine.sock")
    worker = deployed.start("worker-no-engine", "prefect", "worker", "start", "--pool", "oltunes-local",
                            env={"DOCKER_HOST": ""})  # fmt: skip
    try:
        r = run_watched(deployed, "job_id=docker-no-engine", timeout_s=900)
    finally:
        stop(worker, signal.SIGINT)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Failed" in out, out[-3000:]
    assert "no-engine.sock" in out and "job variables" in out, out[-3000:]  # the reason, in what --watch printed
    assert not (deployed.home / "outputs" / "docker-no-engine" / "_decision.json").exists()


@pytest.mark.timeout(3600)
def test_docker_deployment_runs_end_to_end_on_the_engine_its_job_variables_name(deployed):
    from tests.infra.engine import build_image, start_engine

    engine = start_engine()  # skips (CI: fails) when no engine can be started
    worker = None
    try:
        build_image(engine.docker_host)
        redeploy(deployed, engine.docker_host)
        # the worker's own shell names no engine: the deployment's job variables do
        worker = deployed.start("worker-docker", "prefect", "worker", "start", "--pool", "oltunes-local",
                                env={"DOCKER_HOST": ""})  # fmt: skip
        r = run_watched(deployed, "job_id=docker-e2e", "items_per_worker=2500")
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:] + deployed.logs()
        shards = list((deployed.home / "outputs" / "docker-e2e").glob("worker-*/part-*.parquet"))
        assert shards, deployed.logs()
        logs = list((deployed.home / "outputs" / "docker-e2e").glob("**/worker.log"))
        assert logs  # a container's output, saved when it was removed
    finally:
        stop(worker, signal.SIGINT)
        redeploy(deployed, "unix:///nonexistent/docker.sock")  # later tests of the session get no stale engine
        engine.stop()
