"""The Docker environment checks every pool's engine before any decision: a pool whose engine does not answer is
refused with a reason that says where the engine address comes from (the inventory or the deployment's job
variables), never a failure after the decision."""

from __future__ import annotations

import pytest

from oltunes.errors import MissingDependency
from oltunes.launchers.environment import Environment
from oltunes.types import ClusterState


def _inventory(tmp_path, engines: dict[str, str | None]):
    lines = ["pools:"]
    for name, engine in engines.items():
        lines += [f"  - name: {name}", "    accelerator: cpu", "    count: 1", "    cpu_set: [0]"]
        if engine:
            lines.append(f"    engine: {engine}")
    path = tmp_path / "inventory.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_no_pool_with_an_answering_engine_is_one_clear_error_naming_every_pool(tmp_path):
    inv = _inventory(tmp_path, {"cpu-a": f"unix://{tmp_path}/a.sock", "cpu-b": f"unix://{tmp_path}/b.sock"})
    env = Environment.make("docker")
    with pytest.raises(MissingDependency) as e:
        env.ready_cluster(env.cluster(inv))
    msg = str(e.value)
    assert "pool cpu-a" in msg and "pool cpu-b" in msg and f"{tmp_path}/a.sock" in msg
    assert "job variables" in msg and "engine:" in msg  # where the address comes from


def test_pools_sharing_an_engine_share_one_reason(tmp_path):
    sock = f"unix://{tmp_path}/shared.sock"
    env = Environment.make("docker")
    with pytest.raises(MissingDependency) as e:
        env.ready_cluster(env.cluster(_inventory(tmp_path, {"cpu-a": sock, "cpu-b": sock})))
    assert "pools cpu-a, cpu-b:" in str(e.value) and str(e.value).count("shared.sock") == 1


def test_the_engine_comes_from_the_flow_process_environment_when_the_pool_names_none(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/from-job-variables.sock")
    env = Environment.make("docker")
    with pytest.raises(MissingDependency, match="from-job-variables.sock"):
        env.ready_cluster(env.cluster(_inventory(tmp_path, {"cpu-a": None})))


class Lines:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, fmt: str, *args: object) -> None:
        self.errors.append(fmt % args)

    def warning(self, fmt: str, *args: object) -> None:
        self.warnings.append(fmt % args)


def test_usable_cluster_says_why_in_one_error_line(tmp_path):
    log = Lines()
    with pytest.raises(MissingDependency):
        Environment.make("docker").usable_cluster(_inventory(tmp_path, {"cpu-a": f"unix://{tmp_path}/a.sock"}), log)
    assert len(log.errors) == 1 and "no Docker engine is reachable" in log.errors[0]


def test_environments_without_engines_keep_every_pool(tmp_path):
    log = Lines()
    local = Environment.make("local")
    assert isinstance(local.usable_cluster(None, log), ClusterState) and local.usable_cluster(None, log) == local.cluster()
    assert log.errors == log.warnings == []
