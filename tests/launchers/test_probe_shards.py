"""Probe shards' plan: the parts partition the input exactly, probe sizes stay in their bounds, the plan and the
probe record resume exactly (fast: no worker, no flow)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oltunes.errors import DataError
from oltunes.launchers.batch_job import PLAN_FILE, part_bounds, plan_parts
from oltunes.launchers.probe_shards import (MAX_PROBED_SHARE, MIN_PROBE_BATCHES, PROBES_FILE, ProbeRecord,
                                            ProbeShard, probe_decisions, probe_sizes, recorded_probes)
from oltunes.types import Candidate, Decision, Explanation, Prediction, Trial, Variant
from oltunes.worker.batch import run_batch, shards_complete
from oltunes.worker.dataset import Dataset, read_dataset, write_dataset


def pred(thr: float = 1000.0) -> Prediction:
    return Prediction(latency_p99_ms=5.0, energy_j_per_item=0.01, throughput_items_per_s=thr)


def cand(pool: str, name: str, batch: int = 16) -> Candidate:
    v = Variant(family="cnn", name=name, size="s", precision="fp32", accuracy=0.9, params=10, bytes=10, gflops=0.001)
    return Candidate(pool=pool, accelerator="cpu", variant=v, batch_size=batch)


def first_decision(n_trials: int = 2) -> Decision:
    trials = tuple(Trial(candidate=cand(f"pool-{i}", f"cnn-t{i}"), device=i, predicted=pred(500.0 + i), value=0.1)
                   for i in range(n_trials))  # fmt: skip
    return Decision(job_id="job-p", candidate=cand("pool-a", "cnn-s-fp32"), trials=trials,
                    explanation=Explanation(predicted=pred(), n_candidates=5, n_feasible=3, ranked_on="J/item"))


@settings(max_examples=300, deadline=None)
@given(items=st.integers(1, 5_000), per_worker=st.integers(1, 2_000), probes=st.lists(st.integers(1, 400), max_size=4))
def test_part_bounds_partition_the_input_exactly(items, per_worker, probes):
    if sum(probes) >= items:
        with pytest.raises(DataError, match="probe_items"):
            part_bounds(items, per_worker, probes)
        return
    bounds = part_bounds(items, per_worker, probes)
    covered = [i for lo, hi in bounds for i in range(lo, hi)]
    assert covered == list(range(items))  # every row once, in order
    assert all(hi > lo for lo, hi in bounds)
    assert [hi - lo for lo, hi in bounds[: len(probes)]] == probes  # the probe shards come first, at their sizes
    assert all(hi - lo <= per_worker for lo, hi in bounds[len(probes):])


@settings(max_examples=300, deadline=None)
@given(items=st.integers(100, 10_000_000), share=st.floats(0.0, 0.2), max_s=st.floats(0.01, 3_600),
       batches=st.lists(st.integers(1, 512), min_size=1, max_size=4), thr=st.floats(0.0, 1e6))
def test_probe_sizes_stay_within_their_bounds(items, share, max_s, batches, thr):
    predicted = [(b, pred(thr)) for b in batches]
    try:
        sizes = probe_sizes(items, predicted, share, max_s)
    except DataError as e:  # a job too small for its probes says so
        assert "too small" in str(e)
        return
    assert len(sizes) == len(batches) and all(n >= 1 for n in sizes)
    assert sum(sizes) <= max(MAX_PROBED_SHARE * items, len(sizes)) and sum(sizes) < items
    for n, b in zip(sizes, batches):
        if thr > 0:  # never more than the predicted time bound allows (at least one batch)
            assert n <= max(int(thr * max_s), b)


def test_probe_sizes_take_the_share_or_enough_batches():
    assert probe_sizes(100_000, [(16, pred(1e6)), (8, pred(1e6))], 0.02, 60.0) == [2_000, 2_000]
    assert probe_sizes(100_000, [(256, pred(1e6))], 0.001, 60.0) == [MIN_PROBE_BATCHES * 256]
    assert probe_sizes(100_000, [(16, pred(10.0))], 0.02, 60.0) == [600]  # 10 items/s for 60 s


def test_probe_decisions_run_the_choice_then_each_trial_under_jobs_of_their_own():
    first = first_decision(3)
    ds = probe_decisions(first, device=1, limit=2)
    assert [d.job_id for d in ds] == ["job-p.probe-0", "job-p.probe-1", "job-p.probe-2"]
    assert [d.candidate for d in ds] == [first.candidate, *(t.candidate for t in first.trials[:2])]
    assert [(d.group.pool, d.group.device) for d in ds] == [("pool-a", 1), ("pool-0", 0), ("pool-1", 1)]
    assert [d.explanation.predicted for d in ds] == [first.explanation.predicted, *(t.predicted for t in first.trials[:2])]
    assert len({d.decision_id for d in ds} | {first.decision_id}) == 4 and not any(d.trials for d in ds)


def test_probe_record_resumes_and_a_bad_one_names_the_file(tmp_path):
    assert recorded_probes(tmp_path) is None
    first = first_decision()
    rec = ProbeRecord(first=first, probes=[ProbeShard(items=n, decision=d)
                                           for n, d in zip([10, 20, 30], probe_decisions(first, 0, 2))])
    rec.save(tmp_path)
    assert recorded_probes(tmp_path) == rec and rec.items == [10, 20, 30]
    (tmp_path / PROBES_FILE).write_text('{"first": 3}')
    with pytest.raises(DataError, match=PROBES_FILE) as e:
        recorded_probes(tmp_path)
    assert '"first": 3' not in str(e.value)


def dataset(path, n: int = 500):
    rng = np.random.default_rng(0)
    return write_dataset(path, Dataset(np.arange(1000, 1000 + n), rng.random((n, 4), dtype=np.float32), None))


def test_plan_with_probes_slices_the_input_in_order_and_resumes_only_the_same_plan(tmp_path):
    data = dataset(tmp_path / "in.parquet")
    out = tmp_path / "out"
    parts = plan_parts(out, 500, 200, data, probe_items=[30, 40])
    assert [(p.start, p.items, p.probe) for p in parts] == [(0, 30, 0), (30, 40, 1), (70, 200, None), (270, 200, None),
                                                           (470, 30, None)]
    ids = [i for p in parts for i in read_dataset(p.input_path).ids.tolist()]
    assert ids == list(range(1000, 1500))
    assert json.loads((out / PLAN_FILE).read_text())["probe_items"] == [30, 40]
    assert plan_parts(out, 500, 200, data, probe_items=[30, 40]) == parts  # a re-run finds the same parts
    with pytest.raises(DataError, match="another job's parts"):
        plan_parts(out, 500, 200, data, probe_items=[30, 41])
    with pytest.raises(DataError, match="another job's parts"):
        plan_parts(out, 500, 200, data)


def test_a_plan_without_probes_is_what_it_always_was(tmp_path):
    data = dataset(tmp_path / "in.parquet")
    plan_parts(tmp_path / "out", 500, 200, data)
    assert "probe_items" not in json.loads((tmp_path / "out" / PLAN_FILE).read_text())


def test_shards_complete_is_what_a_resumed_worker_would_skip(tmp_path, built_zoo):
    model = built_zoo / "models" / "cnn-s-fp32.onnx"
    from oltunes.zoo import make_dataset

    data = make_dataset("cnn", 250, tmp_path / "cnn.parquet", seed=1)
    out = tmp_path / "w"
    assert not shards_complete(out, 250, 100)
    run_batch(model, data, out, shard_size=100, max_shards=2, device="cpu")
    assert not shards_complete(out, 250, 100)  # two of three shards
    run_batch(model, data, out, shard_size=100, device="cpu")
    assert shards_complete(out, 250, 100)
    assert sum(pq.read_metadata(p).num_rows for p in out.glob("part-*.parquet")) == 250
