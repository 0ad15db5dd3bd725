"""Atomic writes give files the user's umask mode (what ``open(path, "w")`` gives), not mkstemp's private 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

# Each writer persists through oltunes.atomic: plain text/JSON (tuner state, reports), a parquet dataset
# (part inputs), a worker's shards and report (a real batch run), a plot-like binary blob.
WRITE_ALL = r"""
import sys
from pathlib import Path
from oltunes.atomic import atomic_write, atomic_write_json, atomic_write_text
from oltunes.worker import run_batch
from oltunes.zoo import make_dataset

out, model = Path(sys.argv[1]), Path(sys.argv[2])
atomic_write_text(out / "state.txt", "x")
atomic_write_json(out / "report.json", {"a": 1}, durable=True)
atomic_write(out / "plot.png", lambda tmp: tmp.write_bytes(b"\x89PNG"))
data = make_dataset("cnn", 120, out / "in.parquet", seed=1)
run_batch(model, data, out / "shards", batch_size=32, shard_size=50, report=out / "run" / "report.json")
"""


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_files_follow_the_umask(built_zoo, tmp_path, umask):
    model = built_zoo / "models" / "cnn-m-int8.onnx"
    subprocess.run(
        [sys.executable, "-c", WRITE_ALL, str(tmp_path), str(model)],
        check=True, preexec_fn=lambda: os.umask(umask), timeout=120,
    )  # fmt: skip
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"state.txt", "report.json", "plot.png", "in.parquet", "part-00000.parquet", "part-00002.parquet", "_job.json"} <= names
    want = 0o666 & ~umask
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {oct(want)}, modes
    assert not [p for p in tmp_path.rglob("*.tmp")]  # no temp file left behind


def test_current_umask_reads_without_changing_it():
    from oltunes.atomic import current_umask

    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert current_umask() == 0o027  # reading did not reset it
    finally:
        os.umask(old)
