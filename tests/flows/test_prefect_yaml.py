"""prefect.yaml: its structure, and a real `prefect deploy --all` against the test harness's API."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
import yaml


@pytest.fixture(scope="module")
def prefect_yaml(repo_root):
    return yaml.safe_load((repo_root / "prefect.yaml").read_text())


def flow_of(entrypoint: str):
    path, name = entrypoint.split(":")
    return getattr(import_module(path.removesuffix(".py").replace("/", ".")), name)


def test_every_deployment_points_at_a_flow_with_parameters_it_accepts(prefect_yaml, repo_root):
    deps = {d["name"]: d for d in prefect_yaml["deployments"]}
    assert {"batch-hourly", "streaming-service"} <= set(deps)
    for d in deps.values():
        assert (repo_root / d["entrypoint"].split(":")[0]).is_file()
        fl = flow_of(d["entrypoint"])
        accepted = set(inspect.signature(fl.fn).parameters)
        assert set(d["parameters"]) <= accepted, (d["name"], set(d["parameters"]) - accepted)
        assert d["work_pool"]["name"].startswith("oltunes-")
    # batch on a schedule, streaming long-running with one instance at a time
    assert deps["batch-hourly"]["schedules"][0]["cron"]
    assert "schedules" not in deps["streaming-service"] and deps["streaming-service"]["concurrency_limit"] == 1
    assert deps["streaming-service"]["parameters"]["duration_s"] >= 3600
    # the production service serves real clients only; replaying a trace is the load-test deployment's job
    assert deps["streaming-service"]["parameters"]["replay"] is False
    assert deps["streaming-replay"]["parameters"]["replay"] is True
    # a docker deployment's engine comes from its job variables (the deployer's OLTUNES_DOCKER_HOST), not the worker
    docker = deps["batch-docker"]
    assert docker["parameters"]["launcher"] == "docker" and "inventory" not in docker["parameters"]
    assert docker["work_pool"]["job_variables"]["env"]["DOCKER_HOST"] == "{{ $OLTUNES_DOCKER_HOST }}"
    # shared pieces come from `definitions:` anchors (YAML resolved them into equal mappings)
    assert deps["batch-hourly"]["work_pool"] == prefect_yaml["definitions"]["work_pools"]["local"]


@pytest.mark.slow
def test_prefect_deploy_registers_every_deployment(prefect_api, repo_root, tmp_path):
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_HOME": str(tmp_path / "prefect")}
    prefect = str(Path(sys.executable).with_name("prefect"))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([prefect, *args], env=env, cwd=repo_root, capture_output=True, text=True, timeout=240)

    for pool in ("oltunes-local", "oltunes-gpu"):
        assert cli("work-pool", "create", pool, "--type", "process", "--overwrite").returncode == 0
    r = cli("--no-prompt", "deploy", "--all")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    import asyncio

    from prefect.client.orchestration import get_client

    async def read(*names: str):
        async with get_client() as c:
            return [await c.read_deployment_by_name(n) for n in names]

    batch, gpu, stream = asyncio.run(
        read("batch-inference/batch-hourly", "batch-inference/batch-gpu-nightly", "streaming-inference/streaming-service")
    )
    assert batch.work_pool_name == "oltunes-local" and batch.parameters["launcher"] == "local"
    assert batch.schedules and batch.schedules[0].schedule.cron == "0 * * * *"
    assert gpu.work_pool_name == "oltunes-gpu" and gpu.parameters["launcher"] == "docker"
    assert stream.work_pool_name == "oltunes-local" and not stream.schedules
