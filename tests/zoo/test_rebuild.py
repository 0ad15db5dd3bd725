"""Determinism and cache invalidation, on a small fresh build (the s size of each family)."""

from __future__ import annotations

import pytest

from oltunes.zoo import build_zoo, list_entries


@pytest.fixture(scope="module")
def small_zoo(tmp_path_factory, built_zoo):
    zoo_dir = tmp_path_factory.mktemp("small-zoo")
    build_zoo(zoo_dir, sizes=["s"])
    return zoo_dir


def test_two_builds_give_identical_files_and_accuracies(small_zoo, built_zoo):
    fresh = {e.name: e for e in list_entries(small_zoo)}
    shared = {e.name: e for e in list_entries(built_zoo)}
    assert len(fresh) == 6
    for name, e in fresh.items():
        assert e.accuracy == shared[name].accuracy, name
        assert e.sha256 == shared[name].sha256, name


def test_a_damaged_file_is_rebuilt_alone(small_zoo):
    target = small_zoo / "models" / "cnn-s-int8.onnx"
    good = list_entries(small_zoo)
    target.write_bytes(b"not an onnx file")
    lines: list[str] = []
    build_zoo(small_zoo, sizes=["s"], progress=lines.append)
    rebuilt = [line.split()[1] for line in lines if line.startswith("built")]
    assert rebuilt == ["cnn-s-int8"]
    assert not any(line.startswith("trained") for line in lines)  # derived from the cached fp32 file
    assert {e.name: e.sha256 for e in list_entries(small_zoo)} == {e.name: e.sha256 for e in good}


def test_force_rebuilds_the_selection_and_keeps_the_rest(small_zoo):
    lines: list[str] = []
    build_zoo(small_zoo, families=["transformer"], sizes=["s"], force=True, progress=lines.append)
    assert sorted(line.split()[1] for line in lines if line.startswith("built")) == [
        "transformer-s-fp16",
        "transformer-s-fp32",
        "transformer-s-int8",
    ]
    assert len(list_entries(small_zoo)) == 6  # cnn-s entries kept


def test_training_in_process_matches_the_worker_processes(built_zoo, tmp_path):
    from oltunes.atomic import sha256_file
    from oltunes.zoo.build import _train_export

    _train_export("cnn", "s", 0, tmp_path / "cnn-s-fp32.onnx")
    assert sha256_file(tmp_path / "cnn-s-fp32.onnx") == sha256_file(built_zoo / "models" / "cnn-s-fp32.onnx")
