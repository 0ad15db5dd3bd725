"""Batch mode on real zoo models: output, measurement record, resumption, concurrency."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pyarrow.parquet as pq
import pytest

from oltunes.errors import DataError
from oltunes.worker import read_dataset, read_predictions, run_batch
from oltunes.worker.batch import JOB_FILE, shard_name
from oltunes.zoo import make_dataset

MODEL = "models/cnn-m-int8.onnx"


def bare_predictions(model, x):
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x.astype(np.float32)})[0].argmax(1)


@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_predictions_and_measurement_record(built_zoo, tmp_path, fmt):
    data_path = make_dataset("cnn", 700, tmp_path / f"in.{fmt}", seed=3)
    data = read_dataset(data_path)
    rep = run_batch(
        built_zoo / MODEL, data_path, tmp_path / "out", batch_size=32, shard_size=300, report=tmp_path / "m.json"
    )

    table = read_predictions(tmp_path / "out")
    assert table["id"].to_pylist() == data.ids.tolist()
    expected = bare_predictions(built_zoo / MODEL, data.x)
    assert np.array_equal(table["pred"].to_numpy(), expected)
    assert sorted(p.name for p in (tmp_path / "out").glob("part-*")) == [shard_name(i) for i in range(3)]

    record = json.loads((tmp_path / "m.json").read_text())
    assert record == rep.model_dump(mode="json")
    assert record["items"] == record["items_total"] == 700
    assert record["batches"] == 10 + 10 + 4  # 300 = 9x32 + 12 (10 batches), twice; 100 = 3x32 + 4
    assert record["shards_done"] == 3 and record["shards_skipped"] == 0 and record["complete"]
    assert record["accuracy"] == pytest.approx(float(np.mean(expected == data.labels)))
    assert record["throughput_items_per_s"] == pytest.approx(700 / record["wall_s"], rel=1e-3)
    assert (
        0 < record["latency_p50_ms"] <= record["latency_p95_ms"] <= record["latency_p99_ms"] <= record["latency_max_ms"]
    )
    assert record["compute_s"] <= record["wall_s"]
    assert record["cpu_time_s"] > 0
    assert record["provider"] == "CPUExecutionProvider" and record["device"] == "cpu"
    assert (record["threads"], record["batch_size"], record["concurrency"]) == (1, 32, 1)


def test_concurrency_gives_the_same_predictions(built_zoo, tmp_path):
    data_path = make_dataset(None, 500, tmp_path / "in.npz")
    one = run_batch(built_zoo / MODEL, data_path, tmp_path / "a", batch_size=16, shard_size=200)
    three = run_batch(
        built_zoo / MODEL, data_path, tmp_path / "b", batch_size=16, shard_size=200, concurrency=3, threads=2
    )
    assert three.concurrency == 3 and three.threads == 2
    assert read_predictions(tmp_path / "a").equals(read_predictions(tmp_path / "b"))
    assert one.accuracy == three.accuracy


def test_unlabelled_input_has_no_accuracy_and_no_label_column(built_zoo, tmp_path):
    x = read_dataset(make_dataset("transformer", 50, tmp_path / "l.npz")).x
    np.savez(tmp_path / "u.npz", x=x.reshape(50, 64))  # flat items, no ids, no labels
    rep = run_batch(built_zoo / "models/transformer-s-fp32.onnx", tmp_path / "u.npz", tmp_path / "out", batch_size=8)
    assert rep.accuracy is None and rep.items == 50
    table = read_predictions(tmp_path / "out")
    assert table.column_names == ["id", "pred"] and table["id"].to_pylist() == list(range(50))


def test_interrupted_job_resumes_without_losing_or_duplicating_rows(built_zoo, tmp_path):
    data_path = make_dataset("cnn", 1000, tmp_path / "in.parquet", seed=5)
    out = tmp_path / "out"
    first = run_batch(built_zoo / MODEL, data_path, out, batch_size=64, shard_size=150, max_shards=3)
    assert (first.items, first.shards_done, first.complete) == (450, 3, False)
    done_before = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")}
    assert len(done_before) == 3
    (out / ".part-00003.parquet.x.tmp").write_bytes(b"half a shard")  # what a kill mid-write leaves behind

    second = run_batch(built_zoo / MODEL, data_path, out, batch_size=64, shard_size=150)
    assert (second.items, second.shards_done, second.shards_skipped, second.complete) == (550, 4, 3, True)
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("part-*") if p.name in done_before} == done_before
    assert not list(out.glob(".*.tmp"))
    ids = read_predictions(out)["id"].to_pylist()
    assert ids == read_dataset(data_path).ids.tolist()  # exact: every id once, in order

    third = run_batch(built_zoo / MODEL, data_path, out, batch_size=64, shard_size=150)
    assert (third.items, third.shards_skipped, third.batches) == (0, 7, 0)


def test_a_damaged_shard_is_redone(built_zoo, tmp_path):
    data_path = make_dataset("cnn", 300, tmp_path / "in.npz")
    out = tmp_path / "out"
    run_batch(built_zoo / MODEL, data_path, out, shard_size=100)
    (out / shard_name(1)).write_bytes(b"garbage")
    rep = run_batch(built_zoo / MODEL, data_path, out, shard_size=100)
    assert (rep.shards_done, rep.shards_skipped) == (1, 2)
    assert pq.read_table(out / shard_name(1))["id"].to_pylist() == list(range(100, 200))


def test_output_of_another_job_is_refused_unless_overwrite(built_zoo, tmp_path):
    a = make_dataset("cnn", 200, tmp_path / "a.npz", seed=1)
    out = tmp_path / "out"
    run_batch(built_zoo / MODEL, a, out, shard_size=100)
    with pytest.raises(DataError, match="different job.*shard_size"):
        run_batch(built_zoo / MODEL, a, out, shard_size=50)
    with pytest.raises(DataError, match="different job.*model_sha256"):
        run_batch(built_zoo / "models/cnn-s-fp32.onnx", a, out, shard_size=100)
    rep = run_batch(built_zoo / MODEL, a, out, shard_size=50, overwrite=True)
    assert rep.shards_done == 4 and len(list(out.glob("part-*"))) == 4
    assert json.loads((out / JOB_FILE).read_text())["shard_size"] == 50
