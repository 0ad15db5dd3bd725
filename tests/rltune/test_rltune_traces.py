"""Trace loaders: real files parse into the paper's shapes; bad files get an error naming the column; held-out
sequences never contain a training job."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.errors import DataError
from oltunes.rltune.traces import TRAIN_SHARE, load_trace, sequences

GOOD_PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n" \
              "2017-10-09 07:02:55,600.0,8,4800.0,b\n"


@pytest.mark.parametrize(("loader", "text", "column"), [
    ("philly", GOOD_PHILLY.replace("duration", "runtime"), "duration"),
    ("philly", GOOD_PHILLY.replace(",8,", ",eight,"), "num_gpus"),
    ("philly", GOOD_PHILLY.replace("2017-10-09 07:02:55", "yesterday"), "timestamp"),
    ("philly", GOOD_PHILLY.replace("600.0", "-5"), "duration"),
    ("alibaba", "name,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time,scheduled_time\n"
                "p,1,1000,H100,LS,0,100,0\n", "gpu_spec"),
    ("alibaba", "name,num_gpu,gpu_milli,gpu_spec,qos,creation_time,scheduled_time\np,1,1000,,LS,0,0\n",
     "deletion_time"),
    ("helios", "workload_id,name,time,num_replicas\n1,a,zero,4\n", "time"),
])
def test_bad_trace_file_names_the_column(tmp_path, loader, text, column):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    if loader == "helios":  # the Helios loader also reads the Saturn summary two folders up
        (tmp_path / "helios").mkdir()
        (tmp_path / "helios" / "helios_cluster_summary.csv").write_text(
            "id,med_run_time_gpu,avg_run_time_gpu\nSaturn,124,5252\n")
        path = tmp_path / "sia" / "w.csv"
        path.parent.mkdir()
        path.write_text(text)
    with pytest.raises(DataError, match=f"'{column}'") as e:
        load_trace(loader, path)
    assert "yesterday" not in str(e.value) and "eight" not in str(e.value)  # never echoes the input


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_trace("philly", tmp_path / "absent.csv")
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(DataError, match="not a readable CSV"):
        load_trace("philly", bad)


def test_sequences_are_held_out_and_loaded(tiny_trace):
    cut = int(len(tiny_trace) * TRAIN_SHARE)
    train = sequences(tiny_trace, split="train", n=5, length=64, seed=3)
    test = sequences(tiny_trace, split="test", n=5, length=64)
    assert all(s.job.max() < cut for s in train) and all(s.job.min() >= cut for s in test)
    again = sequences(tiny_trace, split="test", n=5, length=64)
    assert all(np.array_equal(a.job, b.job) for a, b in zip(test, again)), "held-out sequences are fixed"
    s = test[0]
    asked = float((s.gpus * np.minimum(s.duration, s.submit[-1])).sum())
    assert asked / (s.shape.capacity * s.submit[-1]) == pytest.approx(1.5, rel=1e-3)


@pytest.mark.parametrize(("name", "rel", "pools"), [
    ("philly", "pollux/philly_jobs.csv.gz", 2),
    ("alibaba", "alibaba/gpu_v2023/openb_pod_list_gpuspec33.csv", 5),
    ("helios", "sia/workloads_saturn.csv", 5),
])
def test_real_traces_load_into_the_paper_shapes(name, rel, pools):
    from tests.rltune.conftest import shared_file

    tr = load_trace(name, shared_file(rel))
    assert len(tr.shape.pools) == pools and len(tr) > 1000
    assert np.all(np.diff(tr.submit) >= 0) and np.all(tr.duration > 0)
    assert tr.gpus.min() >= 1 and tr.gpus.max() <= 64
    assert tr.allowed.any(axis=1).all()
