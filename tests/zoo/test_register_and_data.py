"""User models (register_variant), demo datasets (make_dataset) and the `oltunes zoo` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from oltunes.atomic import sha256_file
from oltunes.cli import app
from oltunes.errors import ConfigError, DataError, ModelError
from oltunes.worker import read_dataset, run_batch
from oltunes.zoo import (
    build_zoo,
    list_entries,
    list_variants,
    make_dataset,
    register_variant,
)
from oltunes.zoo.data import digits_split


def linear_model(path, w: np.ndarray) -> None:
    """A user's own ONNX model with another input shape: (n, 4) float32 -> (n, 3) scores."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "w"], ["scores"])],
        "user",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(w.astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what an older exporter writes; onnxruntime reads it
    onnx.save(model, str(path))


def test_register_a_user_model_measures_its_accuracy(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 3))
    x = rng.normal(size=(200, 4)).astype(np.float32)
    labels = rng.integers(0, 3, size=200)
    np.savez(tmp_path / "eval.npz", x=x, label=labels)
    linear_model(tmp_path / "mine.onnx", w)

    zoo = tmp_path / "zoo"
    v = register_variant(tmp_path / "mine.onnx", tmp_path / "eval.npz", "linear", "tiny", "fp32", zoo_dir=zoo)
    assert v.accuracy == pytest.approx(float(np.mean((x @ w.astype(np.float32)).argmax(1) == labels)))
    assert (v.family, v.name, v.params) == ("linear", "linear-tiny-fp32", 12)
    assert v.gflops == pytest.approx(2 * 4 * 3 / 1e9)  # counted from the graph: one 4 x 3 product per item
    (entry,) = list_entries(zoo)
    assert entry.source == "user" and entry.input_shape == (None, 4) and entry.input_name == "features"
    assert entry.path.startswith(str(zoo)) and entry.eval_set.startswith(str(zoo))  # copied in: self-contained
    assert Path(entry.path).read_bytes() == (tmp_path / "mine.onnx").read_bytes()
    assert entry.sha256 == sha256_file(Path(entry.path)) and entry.bytes == Path(entry.path).stat().st_size
    assert not list((zoo / "user").glob(".*.tmp"))  # copies went through temp files that were renamed

    # the registered model is servable by the worker like any other
    rep = run_batch(entry.path, tmp_path / "eval.npz", tmp_path / "out", batch_size=50)
    assert rep.accuracy == pytest.approx(v.accuracy)

    # re-registering replaces; a shipped name is refused
    again = register_variant(tmp_path / "mine.onnx", tmp_path / "eval.npz", "linear", "tiny", "fp32", zoo_dir=zoo)
    assert len(list_variants(zoo)) == 1 and again == v
    build_zoo(zoo, families=["cnn"], sizes=["s"])
    with pytest.raises(ConfigError, match="shipped"):
        register_variant(tmp_path / "mine.onnx", tmp_path / "eval.npz", "cnn", "s", "fp32", zoo_dir=zoo)
    # the user variant survived the build
    assert {e.name for e in list_entries(zoo) if e.source == "user"} == {"linear-tiny-fp32"}


def test_register_refuses_bad_inputs(tmp_path):
    np.savez(tmp_path / "nolabel.npz", x=np.zeros((5, 4), np.float32))
    np.savez(tmp_path / "eval.npz", x=np.zeros((5, 4), np.float32), label=np.zeros(5, np.int64))
    linear_model(tmp_path / "mine.onnx", np.ones((4, 3)))
    (tmp_path / "broken.onnx").write_bytes(b"\x01\x02\x03")
    zoo = tmp_path / "zoo"
    with pytest.raises(DataError, match="no 'label'"):
        register_variant(tmp_path / "mine.onnx", tmp_path / "nolabel.npz", "linear", "tiny", zoo_dir=zoo)
    with pytest.raises(ModelError, match="could not be loaded"):
        register_variant(tmp_path / "broken.onnx", tmp_path / "eval.npz", "linear", "tiny", zoo_dir=zoo)
    with pytest.raises(ConfigError, match="precision"):
        register_variant(tmp_path / "mine.onnx", tmp_path / "eval.npz", "linear", "tiny", "bf16", zoo_dir=zoo)
    np.savez(tmp_path / "wide.npz", x=np.zeros((5, 64), np.float32), label=np.zeros(5, np.int64))
    with pytest.raises(DataError, match="expects"):
        register_variant(tmp_path / "mine.onnx", tmp_path / "wide.npz", "linear", "tiny", zoo_dir=zoo)
    assert list_variants(zoo) == []


@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_make_dataset_draws_labelled_held_out_items(tmp_path, suffix):
    test = digits_split(0).test
    a = read_dataset(make_dataset("cnn", 100, tmp_path / f"a{suffix}", seed=1))
    b = read_dataset(make_dataset("transformer", 100, tmp_path / f"b{suffix}", seed=1))
    c = read_dataset(make_dataset(None, 100, tmp_path / f"c{suffix}", seed=2))
    assert a.ids.tolist() == list(range(100)) and a.x.shape == (100, 1, 8, 8) and a.x.dtype == np.float32
    assert np.array_equal(a.x, b.x) and np.array_equal(a.labels, b.labels)  # same seed, same draw
    assert not np.array_equal(a.x, c.x)
    # every item is a held-out item with its true label
    index = {row.tobytes(): label for row, label in zip(test.x, test.labels, strict=True)}
    assert all(index[row.tobytes()] == label for row, label in zip(a.x, a.labels, strict=True))
    big = read_dataset(make_dataset("cnn", 2000, tmp_path / f"big{suffix}"))  # more than the split holds
    assert len(big) == 2000 and len(np.unique(big.ids)) == 2000


def test_make_dataset_refuses_non_zoo_families(tmp_path):
    with pytest.raises(ConfigError, match="not a zoo family"):
        make_dataset("resnet", 10, tmp_path / "x.npz")
    with pytest.raises(ConfigError, match="at least 1"):
        make_dataset("cnn", 0, tmp_path / "x.npz")
    with pytest.raises(DataError, match="unsupported format"):
        make_dataset("cnn", 10, tmp_path / "x.csv")


def test_cli_list_json_has_one_object_per_variant(built_zoo):
    result = CliRunner().invoke(app, ["zoo", "list", "--json", "--zoo-dir", str(built_zoo)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 18
    for r in rows:
        assert {"family", "variant", "size", "precision", "accuracy", "path", "params", "bytes"} <= set(r)
    assert {r["variant"] for r in rows} == {v.name for v in list_variants(built_zoo)}


def test_cli_dataset_and_register(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["zoo", "dataset", "-o", str(tmp_path / "d.parquet"), "--n", "30"])
    assert r.exit_code == 0 and len(read_dataset(tmp_path / "d.parquet")) == 30
    linear_model(tmp_path / "m.onnx", np.ones((4, 3)))
    r = runner.invoke(
        app,
        [
            "zoo",
            "register",
            "-m",
            str(tmp_path / "m.onnx"),
            "--eval",
            str(tmp_path / "d.parquet"),
            "--family",
            "linear",
            "--size",
            "x",
            "--zoo-dir",
            str(tmp_path / "zoo"),
        ],
    )
    assert r.exit_code == 2 and r.stderr.startswith("error:") and "expects (n, 4)" in r.stderr
