"""The production templates: the compose stack validates with its documented .env, and the images are worker-only."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from oltunes.config import REPO_ROOT
from tests.infra.engine import unavailable

pytestmark = pytest.mark.slow  # docker compose and image builds

INFRA = REPO_ROOT / "infra"


def compose_cli() -> list[str]:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    unavailable("neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose)")


def compose_config(*env_file: str) -> subprocess.CompletedProcess:
    args = [*compose_cli(), "-f", str(INFRA / "compose.yaml"), *(a for f in env_file for a in ("--env-file", f)), "config"]
    return subprocess.run(args, capture_output=True, text=True, cwd=INFRA, timeout=120, env={"PATH": "/usr/bin:/bin:/usr/local/bin"})


def test_compose_validates_with_the_example_env_and_is_production_shaped():
    r = compose_config(str(INFRA / ".env.example"))
    assert r.returncode == 0, r.stderr
    services = yaml.safe_load(r.stdout)["services"]
    assert {"postgres", "prefect", "mlflow", "zoo", "tuner", "prefect-worker", "worker"} <= set(services)
    for name, svc in services.items():
        repo, _, tag = svc["image"].rpartition(":")
        assert repo and tag and tag != "latest", f"{name}: image {svc['image']} is not pinned"
        if name != "zoo":  # a one-shot job has nothing to be healthy about
            assert svc.get("healthcheck", {}).get("test"), f"{name}: no healthcheck"
        for port in svc.get("ports", []):
            assert str(port.get("host_ip", port) if isinstance(port, dict) else port).startswith("127.0.0.1"), name
    worker = services["prefect-worker"]
    assert worker["environment"]["PREFECT_API_URL"] == "http://prefect:4200/api"
    assert "oltunes-gpu" in worker["command"] and worker["stop_signal"] == "SIGINT"
    gpu = services["worker"]
    (dev,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert dev["capabilities"] == ["gpu"] and dev["device_ids"] == ["GPU-00000000-0000-0000-0000-000000000000"]
    mounts = [str(v) for s in services.values() for v in s.get("volumes", [])]
    assert sum("docker.sock" in m for m in mounts) == 1  # the Prefect worker's only: never a worker container's
    assert all("docker.sock" not in str(v) for v in gpu.get("volumes", []))
    assert gpu["depends_on"]["zoo"]["condition"] == "service_completed_successfully"  # never an empty model volume


def test_compose_refuses_to_start_without_its_secrets():
    r = compose_config()
    assert r.returncode != 0 and "POSTGRES_PASSWORD" in r.stderr


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_worker_images_run_the_worker_as_a_non_root_user_without_the_zoo_stack(dockerfile):
    text = (INFRA / dockerfile).read_text()
    instructions = [line.split(None, 1) for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    final = instructions[max(i for i, (op, *_) in enumerate(instructions) if op == "FROM"):]
    ops = {op: rest for op, *rest in final}
    assert ops["USER"] == ["10001:10001"] and "HEALTHCHECK" in ops
    assert ops["ENTRYPOINT"] == ['["oltunes", "worker"]']
    assert "torch" not in text.replace("no torch", "") and "[all]" not in text and "[zoo]" not in text
    if dockerfile == "Dockerfile.gpu":
        assert "onnxruntime-gpu" in text and "nvidia/cuda:12." in text
