"""`oltunes rltune train|eval` end to end on a small Philly-format file (no shared data needed)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from oltunes.cli import app


def _philly_file(path, n=700, seed=0):
    rng = np.random.default_rng(seed)
    t = pd.Timestamp("2017-10-01") + pd.to_timedelta(np.cumsum(rng.exponential(30.0, n)), unit="s")
    gpus = rng.choice([1, 1, 1, 2, 4, 8, 16, 32], size=n)
    dur = np.round(np.exp(rng.normal(7.0, 1.5, n)))
    pd.DataFrame({"timestamp": t.strftime("%Y-%m-%d %H:%M:%S"), "duration": dur, "num_gpus": gpus,
                  "gpu_time": dur * gpus, "cluster": rng.choice(["a", "b", "c"], n)}).to_csv(path, index=False)
    return path


def test_train_then_eval_writes_weights_report_and_plots(tmp_path):
    trace = _philly_file(tmp_path / "philly.csv")
    weights = tmp_path / "w.safetensors"
    r = CliRunner().invoke(app, ["rltune", "train", "--trace", "philly", "--file", str(trace), "--iterations", "2",
                                 "--episodes", "2", "--length", "32", "--seed", "3", "--out", str(weights)])
    assert r.exit_code == 0, r.output
    assert weights.exists()
    assert "iteration 2/2" in r.output and "ran all 2 iterations" in r.output  # progress and why training ended
    report = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["rltune", "eval", "--trace", "philly", "--file", str(trace), "--weights",
                                 str(weights), "--policies", "fcfs,sjf", "--sequences", "2", "--length", "48",
                                 "--json", str(report), "--plots", str(tmp_path / "plots")])
    assert r.exit_code == 0, r.output
    assert "policy 3/3 rltune: 2 sequences in" in r.output  # a line per policy played
    rep = json.loads(report.read_text())["philly"]
    assert set(rep) == {"fcfs", "sjf", "rltune"}
    for row in rep.values():
        assert row["avg_queue_delay_s"] >= 0 and row["avg_jct_s"] > 0 and 0 < row["gpu_util"] <= 1
        assert row["mapper_solves"] == 96 and row["mapper_p99_ms"] >= row["mapper_p50_ms"] > 0
    assert len(list((tmp_path / "plots").glob("*.png"))) == 4


def test_bad_trace_file_is_a_clean_cli_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,num_gpus,cluster\n2017-10-01 00:00:00,1,a\n")
    r = CliRunner().invoke(app, ["rltune", "eval", "--trace", "philly", "--file", str(bad), "--sequences", "1"])
    assert r.exit_code == 2 and "'duration'" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["rltune", "eval", "--trace", "nope"])
    assert r.exit_code == 2 and "philly" in r.output  # the error lists the known loaders
