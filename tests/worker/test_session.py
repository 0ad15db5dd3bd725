"""Provider choice and input checks of one session (the CUDA seam is faked by the available-provider list;
the session itself is real, so the fallback that ONNX Runtime really performs is what is checked)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest

from oltunes.errors import DataError, MissingDependency
from oltunes.worker import read_dataset, run_batch
from oltunes.worker.session import CPU, CUDA, ModelSession, requested_providers
from oltunes.zoo import make_dataset

MODEL = "models/cnn-s-int8.onnx"


def test_cpu_build_uses_cpu_and_refuses_cuda(built_zoo):
    s = ModelSession(built_zoo / MODEL)
    assert (s.provider, s.device_kind) == (CPU, "cpu")
    with pytest.raises(MissingDependency, match="onnxruntime-gpu"):
        ModelSession(built_zoo / MODEL, device="cuda")


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")
def test_provider_is_read_back_from_the_session_not_the_available_list(built_zoo, monkeypatch):
    # an onnxruntime that *lists* CUDA (e.g. onnxruntime-gpu without CUDA libraries) but cannot load it
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    assert requested_providers("auto") == [CUDA, CPU]
    assert requested_providers("cpu") == [CPU]
    s = ModelSession(built_zoo / MODEL, device="auto")
    assert s.provider == CPU and s.device_kind == "cpu"  # what really loaded
    with pytest.raises(MissingDependency, match="fell back"):
        ModelSession(built_zoo / MODEL, device="cuda")


def test_prepare_reshapes_flat_items_and_casts_floats(built_zoo):
    s = ModelSession(built_zoo / MODEL)
    x = np.random.default_rng(0).random((3, 64))
    out = s.prepare(x)
    assert out.shape == (3, 1, 8, 8) and out.dtype == np.float32
    with pytest.raises(DataError, match="dtype uint8"):
        s.prepare(np.zeros((3, 64), np.uint8))


def test_parquet_written_by_pandas_without_shape_metadata(built_zoo, tmp_path):
    data = read_dataset(make_dataset("cnn", 120, tmp_path / "ref.npz"))
    frame = pd.DataFrame({"id": data.ids + 1000, "x": list(data.x.reshape(120, 64)), "label": data.labels})
    frame.to_parquet(tmp_path / "user.parquet")
    rep = run_batch(built_zoo / MODEL, tmp_path / "user.parquet", tmp_path / "out", batch_size=50)
    ref = run_batch(built_zoo / MODEL, tmp_path / "ref.npz", tmp_path / "out-ref", batch_size=50)
    assert rep.items == 120 and rep.accuracy == ref.accuracy


def test_duplicate_ids_are_refused(tmp_path):
    np.savez(tmp_path / "dup.npz", x=np.zeros((3, 64), np.float32), id=np.array([1, 1, 2]))
    with pytest.raises(DataError, match="not unique"):
        read_dataset(tmp_path / "dup.npz")
