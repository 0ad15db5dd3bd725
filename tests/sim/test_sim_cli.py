"""`oltunes simulate` end to end on the tiny scenario: table, JSON shape, plots, MLflow parent + child runs."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from oltunes.cli import app

KEYS = {"slo_violation_rate", "p99_ms", "throughput_rps", "gpu_util", "energy_j_per_req", "accuracy_loss_pts",
        "queueing_delay_s", "jct_s"}


def test_cli_writes_report_and_plots(shared_data, oltunes_home, tmp_path):
    out, plots = tmp_path / "r.json", tmp_path / "plots"
    res = CliRunner().invoke(app, ["simulate", "--scenario", "tiny", "--policies", "round-robin,oracle",
                                   "--json", str(out), "--plots", str(plots), "--no-mlflow"])
    assert res.exit_code == 0, res.output
    assert "round-robin" in res.output and "oracle" in res.output
    rep = json.loads(out.read_text())
    assert rep["scenario"] == "tiny" and set(rep["policies"]) == {"round-robin", "oracle"}
    for m in rep["policies"].values():
        assert KEYS <= set(m)
    for name in ("latency_cdf.png", "slo_violations_over_time.png", "energy_vs_accuracy.png"):
        assert (plots / name).stat().st_size > 1000
    assert set(rep["regret_per_quarter"]) == {"round-robin"} and len(rep["regret_per_quarter"]["round-robin"]) == 4
    assert "regret vs the oracle per quarter" in res.output and rep["events"] == []
    assert "world: grounded world, sigma accelerator" in res.output and rep["meta"]["world"] == "grounded"


def test_cli_reports_each_drift_event(shared_data, oltunes_home, tmp_path):
    from oltunes.sim.scenario import load_scenario

    data = load_scenario("tiny").model_dump()
    data["events"] = [{"at_s": 30, "kind": "slow_accelerator", "accelerator": "t4", "factor": 3.0}]
    f = tmp_path / "drift.yaml"
    f.write_text(yaml.safe_dump(data))
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["simulate", "--scenario", str(f), "--policies", "static-profile,oracle",
                                   "--json", str(out), "--no-mlflow"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "drift events" in res.output and "slow_accelerator" in res.output and "recovery" in res.output
    (ev,) = json.loads(out.read_text())["events"]
    assert set(ev["policies"]) == {"static-profile", "oracle"}
    assert {"before", "after", "recovery_s"} <= set(ev["policies"]["oracle"])


def test_cli_bad_scenario_names_the_field(shared_data, oltunes_home, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump({"name": "bad", "duration_s": 10, "pools": [{"name": "a", "accelerator": "a100",
                                 "count": 1}], "workload": {"streaming": [{"trace": "proteus", "replicas": 0}]}}))
    res = CliRunner().invoke(app, ["simulate", "--scenario", str(f), "--policies", "random", "--no-mlflow"])
    assert res.exit_code == 2
    assert "workload.streaming.0.replicas" in res.output
    res = CliRunner().invoke(app, ["simulate", "--scenario", "tiny", "--policies", "nope", "--no-mlflow"])
    assert res.exit_code == 2 and "round-robin" in res.output


@pytest.mark.slow
def test_cli_logs_parent_and_child_runs_to_mlflow(shared_data, oltunes_home):
    import mlflow

    from oltunes.config import get_settings

    res = CliRunner().invoke(app, ["simulate", "--scenario", "tiny", "--policies", "random,oracle"])
    assert res.exit_code == 0, res.output
    mlflow.set_tracking_uri(get_settings().mlflow_uri)
    runs = mlflow.search_runs(experiment_names=["oltunes-simulation"], output_format="list")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and {c.data.tags["policy"] for c in children} == {"random", "oracle"}
    assert all("slo_violation_rate" in c.data.metrics for c in children)


# tiny's streams on a roomier cluster: a shadow runs only on a device no stream runs on (tiny itself has none free)
ROOMY = """name: tiny-roomy
seed: 0
duration_s: 60
control_interval_s: 5
retune_interval_s: 15
pools:
  - {name: cpu, accelerator: cpu, count: 2, slots_per_device: 2}
  - {name: t4, accelerator: t4, count: 3}
  - {name: a100, accelerator: a100, count: 2}
  - {name: h100, accelerator: h100, count: 1}
workload:
  streaming:
    - {trace: proteus, scenario: equal_gamma_300, families: [resnet, bert, mobilenet], rate_scale: 6.5}
  batch:
    - {trace: philly, jobs: 2, families: [resnet], slo_ms: 2000, arrival_window_s: 20}
"""


@pytest.mark.parametrize("trials", [True, False])
def test_cli_reports_exploration_per_policy(shared_data, oltunes_home, tmp_path, trials):
    out = tmp_path / "r.json"
    scenario = tmp_path / "roomy.yaml"
    scenario.write_text(ROOMY)
    res = CliRunner().invoke(app, ["simulate", "--scenario", str(scenario), "--policies", "oltunes,oracle",
                                   "--json", str(out),
                                   "--no-mlflow", "--trials" if trials else "--no-trials"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "exploration energy share" in res.output
    pols = json.loads(out.read_text())["policies"]
    assert pols["oracle"]["exploration_energy_share"] == 0 and pols["oracle"]["shadows_per_job"] == 0
    ol = pols["oltunes"]
    assert (0 < ol["exploration_energy_share"] <= 0.06 and ol["shadows_per_job"] > 0) if trials else (
        ol["exploration_energy_share"] == 0 and ol["shadows_per_job"] == ol["probes_per_job"] == 0)
