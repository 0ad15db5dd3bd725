"""Bad input: a clear error (typed in Python, one stderr line + exit code 2 on the CLI), never a partial file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from oltunes.cli import app
from oltunes.errors import ConfigError, DataError, ModelError
from oltunes.worker import run_batch
from oltunes.zoo import make_dataset

GOOD_MODEL = "models/cnn-s-fp32.onnx"


def _good_input(tmp: Path) -> Path:
    return make_dataset("cnn", 40, tmp / "good.npz")


def _case(name: str):
    """Each case returns (model, input, output, extra kwargs) built from real (damaged) files."""

    def build(zoo: Path, tmp: Path):
        model, inp, out, kw = zoo / GOOD_MODEL, _good_input(tmp), tmp / "out", {}
        if name == "missing model":
            model = tmp / "nope.onnx"
        elif name == "corrupt model":
            model = tmp / "garbage.onnx"
            model.write_bytes(np.random.default_rng(0).bytes(4096))
        elif name == "truncated model":
            model = tmp / "half.onnx"
            whole = (zoo / GOOD_MODEL).read_bytes()
            model.write_bytes(whole[: len(whole) // 2])
        elif name == "wrong item shape":
            inp = tmp / "shape.npz"
            np.savez(inp, x=np.zeros((10, 3), np.float32))
        elif name == "wrong dtype":
            inp = tmp / "dtype.npz"
            np.savez(inp, x=np.zeros((10, 1, 8, 8), np.int64))
        elif name == "empty dataset":
            inp = tmp / "empty.npz"
            np.savez(inp, x=np.zeros((0, 1, 8, 8), np.float32))
        elif name == "corrupt npz":
            inp = tmp / "bad.npz"
            inp.write_bytes(b"PK\x03\x04 this is not a zip archive")
        elif name == "corrupt parquet":
            inp = tmp / "bad.parquet"
            inp.write_bytes(b"PAR1" + b"\x00" * 100)
        elif name == "no x array":
            inp = tmp / "nox.npz"
            np.savez(inp, features=np.zeros((10, 64), np.float32))
        elif name == "missing dataset":
            inp = tmp / "absent.parquet"
        elif name == "output under a file":
            (tmp / "file").write_text("x")
            out = tmp / "file" / "out"
        elif name == "report under a file":
            (tmp / "file").write_text("x")
            kw = {"report": tmp / "file" / "m.json"}
        elif name == "batch size zero":
            kw = {"batch_size": 0}
        return model, inp, out, kw

    return build


CASES = [
    ("missing model", ModelError, "does not exist"),
    ("corrupt model", ModelError, "could not be loaded"),
    ("truncated model", ModelError, "could not be loaded"),
    ("wrong item shape", DataError, r"expects \(n, 1, 8, 8\)"),
    ("wrong dtype", DataError, "dtype int64 does not match"),
    ("empty dataset", DataError, "is empty"),
    ("corrupt npz", DataError, "cannot be read"),
    ("corrupt parquet", DataError, "cannot be read"),
    ("no x array", DataError, "no array named 'x'"),
    ("missing dataset", DataError, "does not exist"),
    ("output under a file", DataError, "not writable"),
    ("report under a file", DataError, "not writable"),
    ("batch size zero", ConfigError, "batch_size"),
]


@pytest.mark.parametrize(("name", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_python_api_raises_a_typed_error_and_writes_nothing(built_zoo, tmp_path, name, error, message):
    model, inp, out, kw = _case(name)(built_zoo, tmp_path)
    with pytest.raises(error, match=message):
        run_batch(model, inp, out, **kw)
    if out.is_dir():
        assert sorted(p.name for p in out.iterdir()) == []


@pytest.mark.parametrize(("name", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_cli_prints_the_reason_and_exits_non_zero(built_zoo, tmp_path, name, error, message):
    model, inp, out, kw = _case(name)(built_zoo, tmp_path)
    args = ["worker", "batch", "--model", str(model), "--input", str(inp), "--output", str(out)]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:") and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if out.is_dir():
        assert sorted(p.name for p in out.iterdir()) == []


def test_serve_refuses_a_corrupt_model_before_binding(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    result = CliRunner().invoke(app, ["worker", "serve", "--model", str(bad), "--port", "0"])
    assert result.exit_code == 2 and "could not be loaded" in result.stderr


def test_unknown_variant_name_lists_the_known_ones(tmp_path, oltunes_home):
    result = CliRunner().invoke(app, ["worker", "batch", "-m", "cnn-xl-fp32", "-i", "x.npz", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "unknown variant 'cnn-xl-fp32'" in result.stderr
