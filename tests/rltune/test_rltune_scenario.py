"""`oltunes simulate` on batch-queue scenarios: your own job log (csv) on your own cluster, every queue policy,
a printed table and a JSON report; bad scenarios and job logs get errors naming the field or column."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from oltunes.cli import app
from oltunes.errors import ConfigError, DataError
from oltunes.rltune import scenario as batch_queue
from oltunes.rltune.traces import load_trace
from tests.rltune.conftest import TINY, synthetic_trace


def _job_log(path, n=600):
    tr = synthetic_trace(n)
    names = [p.name for p in TINY.pools]
    pools = ["|".join(n_ for n_, ok in zip(names, row) if ok) if not row.all() else "" for row in tr.allowed]
    pd.DataFrame({"submit_s": tr.submit, "duration_s": tr.duration, "gpus": tr.gpus, "pools": pools,
                  "group": [f"user{g}" for g in tr.group]}).to_csv(path, index=False)
    return path


def _scenario(tmp_path, **over):
    _job_log(tmp_path / "jobs.csv")
    data = {"kind": "batch-queue", "name": "mine", "trace": "csv", "file": "jobs.csv",
            "cluster": {"name": "tiny", "pools": [{"name": p.name, "nodes": p.nodes, "gpus_per_node": p.gpus_per_node}
                                                  for p in TINY.pools]},
            "sequences": 2, "length": 48, "load": 3.0, "policies": ["fcfs", "sjf", "random"], **over}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_csv_job_log_round_trips_with_its_constraints(tmp_path):
    tr = load_trace("csv", _job_log(tmp_path / "jobs.csv"), TINY)
    ref = synthetic_trace(600)
    assert len(tr) == len(ref) and (tr.allowed == ref.allowed).all() and (tr.gpus == ref.gpus).all()


def test_simulate_runs_a_batch_queue_scenario_with_rltune(tmp_path, tiny_policies):
    path = _scenario(tmp_path, policies=["fcfs", "sjf", "rltune"], rltune={"weights": str(tiny_policies[0])})
    report = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["simulate", "--scenario", str(path), "--json", str(report), "--no-mlflow"])
    assert r.exit_code == 0, r.output
    assert "batch-queue scenario mine" in r.output and "rltune" in r.output and "MILP p99" in r.output
    rep = json.loads(report.read_text())["mine"]
    assert set(rep) == {"fcfs", "sjf", "rltune"}
    for row in rep.values():
        assert row["avg_jct_s"] >= row["avg_queue_delay_s"] >= 0 and row["mapper_solves"] == 96
    # --policies overrides the scenario's list
    r = CliRunner().invoke(app, ["simulate", "--scenario", str(path), "--policies", "slurm", "--json", str(report)])
    assert r.exit_code == 0, r.output
    assert set(json.loads(report.read_text())["mine"]) == {"slurm"}


def test_rltune_without_weights_trains_once_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("OLTUNES_HOME", str(tmp_path / "home"))
    from oltunes.config import get_settings

    get_settings.cache_clear()
    try:
        path = _scenario(tmp_path, policies=["fcfs", "rltune"], rltune={"train": {"iterations": 2,
                                                                                  "episodes_per_iteration": 2}})
        said: list[str] = []
        batch_queue.run(path, progress=said.append)
        assert any("training" in s for s in said)
        cached = list((tmp_path / "home" / "rltune").glob("*.safetensors"))
        assert len(cached) == 1
        said.clear()
        batch_queue.run(path, progress=said.append)
        assert not any("training" in s for s in said), "the second run reuses the cached weights"
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(("over", "field"), [
    ({"length": -4}, "length"),
    ({"trace": "nope"}, "trace"),
    ({"policies": ["fcfs", "not-a-policy"]}, "policies"),
    ({"load": float("inf")}, "load"),
    ({"surprise": 1}, "surprise"),
    ({"rltune": {"train": {"objective": "vibes"}}}, "rltune.train.objective"),
])
def test_bad_scenario_names_the_field(tmp_path, over, field):
    with pytest.raises(ConfigError, match=f"field '{field}") as e:
        batch_queue.load(_scenario(tmp_path, **over))
    assert "not-a-policy" not in str(e.value)
    r = CliRunner().invoke(app, ["simulate", "--scenario", str(_scenario(tmp_path, **over))])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_bad_job_log_names_the_column(tmp_path):
    path = _scenario(tmp_path)
    (tmp_path / "jobs.csv").write_text("submit_s,duration_s,gpus,pools\n0,10,1,gpu-on-the-moon\n")
    with pytest.raises(DataError, match="'pools'") as e:
        batch_queue.run(path)
    assert "moon" not in str(e.value)
    (tmp_path / "jobs.csv").write_text("submit_s,duration_s,gpus\n0,10,1.5\n")
    with pytest.raises(DataError, match="'gpus'"):
        batch_queue.run(path)


def test_shipped_batch_scenarios_load_and_serving_scenarios_are_not_taken():
    assert {"batch-philly", "batch-alibaba", "batch-helios"} <= set(batch_queue.shipped())
    for name in batch_queue.shipped():
        sc, _ = batch_queue.load(name)
        assert sc.name == name and "rltune" in sc.policies
    assert not batch_queue.is_batch_queue("light"), "inference-serving scenarios stay oltunes.sim's"
