"""`oltunes demo` end to end in a fresh home: its own Prefect ephemeral API, MLflow SQLite, local workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_runs_on_embedded_defaults(flows_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(flows_home / "zoo", home / "zoo")  # the zoo build is tested elsewhere; reuse it
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(OLTUNES_HOME=str(home), COLUMNS="160")
    cli = str(Path(sys.executable).with_name("oltunes"))
    r = subprocess.run([cli, "demo", "--batch-jobs", "2", "--items", "600", "--stream-seconds", "8"],
                       env=env, capture_output=True, text=True, timeout=380)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "MLflow UI" in r.stdout and "learner:" in r.stdout and "decisions: first" in r.stdout
    # every long step says what it is doing before it starts, also when the output is piped (no spinner)
    assert "job 1/2: asking the tuner" in r.stdout and "streaming service for 8 s: a gateway" in r.stdout
    assert "cached  cnn-" in r.stdout  # the zoo build's lines
    c = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    batch = c.search_runs([c.get_experiment_by_name("oltunes-batch").experiment_id])
    stream = c.search_runs([c.get_experiment_by_name("oltunes-streaming").experiment_id])
    assert len(batch) == 2 and len(stream) == 1
    assert (home / "prefect").is_dir() and (home / "tuner" / "state.json").is_file()
