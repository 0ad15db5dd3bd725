"""A batch job killed with SIGKILL in the middle, then re-run: exact rows, no duplicates, no loss."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from oltunes.worker import read_dataset, read_predictions
from oltunes.zoo import make_dataset


@pytest.mark.slow
def test_sigkill_mid_job_then_rerun(built_zoo, tmp_path):
    n, shard = 60_000, 2_000
    data_path = make_dataset("transformer", n, tmp_path / "in.npz", seed=9)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "oltunes.worker",
        "batch",
        "--model",
        str(built_zoo / "models/transformer-l-fp32.onnx"),
        "--input",
        str(data_path),
        "--output",
        str(out),
        "--batch-size",
        "64",
        "--shard-size",
        str(shard),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(list(out.glob("part-*.parquet"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the job finished before it could be killed; use more items"

    survivors = sorted(out.glob("part-*.parquet"))
    assert 2 <= len(survivors) < n // shard
    for p in survivors:  # every shard file that exists is complete
        assert pq.read_metadata(p).num_rows == shard

    rerun = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    ids = read_predictions(out)["id"].to_pylist()
    assert ids == read_dataset(data_path).ids.tolist()
    assert len(set(ids)) == n
    assert not list(out.glob(".*.tmp"))
