"""The shipped zoo: real training, real ONNX files, accuracy measured in ONNX Runtime."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

from oltunes.atomic import sha256_file
from oltunes.errors import ConfigError, ModelError
from oltunes.types import Variant
from oltunes.worker.dataset import read_dataset
from oltunes.zoo import (
    PRECISIONS,
    SIZES,
    Family,
    build_zoo,
    get_variant,
    list_entries,
    list_variants,
)
from oltunes.zoo.manifest import MANIFEST, load_entries, save_entries


def test_every_family_size_precision_is_in_the_manifest(built_zoo):
    entries = list_entries(built_zoo)
    keys = {(e.family, e.size, e.precision) for e in entries}
    assert keys == {(f, s, p) for f in Family.known() for s in SIZES for p in PRECISIONS}
    assert len(Family.known()) >= 2
    for e in entries:
        assert e.source == "zoo"
        assert e.name == f"{e.family}-{e.size}-{e.precision}"
        assert e.path and (built_zoo / "models" / f"{e.name}.onnx").samefile(e.path)
        assert e.bytes == (built_zoo / "models" / f"{e.name}.onnx").stat().st_size
        assert e.sha256 == sha256_file(built_zoo / "models" / f"{e.name}.onnx")
        assert e.input_shape == (None, 1, 8, 8) and e.input_dtype == "float32"
        assert e.eval_items == len(read_dataset(e.eval_set))
    # the plain shared type round-trips through validation
    for v in list_variants(built_zoo):
        assert Variant.model_validate(v.model_dump()) == v
    # paths inside the zoo are stored relative, so the folder can move
    raw = json.loads((built_zoo / MANIFEST).read_text())
    assert all(not r["path"].startswith("/") for r in raw["variants"])


def test_sizes_grow_in_parameters_and_compute_and_precisions_shrink_files(built_zoo):
    by = {(v.family, v.size, v.precision): v for v in list_variants(built_zoo)}
    for fam in Family.known():
        s, m, l_ = (by[(fam, size, "fp32")].params for size in SIZES)
        assert s < m < l_ and l_ >= 10 * s, (fam, s, m, l_)
        for size in SIZES:
            assert by[(fam, size, "fp16")].params == by[(fam, size, "fp32")].params
            assert by[(fam, size, "fp16")].bytes < by[(fam, size, "fp32")].bytes
        assert by[(fam, "l", "int8")].bytes < by[(fam, "l", "fp16")].bytes
        s, m, l_ = (by[(fam, size, "fp32")].gflops for size in SIZES)  # compute, counted from each graph
        assert 0 < s < m < l_, (fam, s, m, l_)
        for size in SIZES:
            assert by[(fam, size, "fp16")].gflops == by[(fam, size, "int8")].gflops == by[(fam, size, "fp32")].gflops


def test_accuracy_is_plausible_and_measured_from_the_onnx_file(built_zoo):
    variants = {v.name: v for v in list_variants(built_zoo)}
    for v in variants.values():
        fp32 = variants[f"{v.family}-{v.size}-fp32"]
        assert fp32.accuracy > 0.85, v.name
        assert abs(v.accuracy - fp32.accuracy) <= 0.05, (v.name, v.accuracy, fp32.accuracy)
    # recompute two variants' accuracy with a bare ONNX Runtime session on the stored eval set
    data = read_dataset(built_zoo / "eval.npz")
    for name in ("cnn-m-int8", "transformer-s-fp16"):
        sess = ort.InferenceSession(variants[name].path, providers=["CPUExecutionProvider"])
        pred = sess.run(None, {"x": data.x.astype(np.float32)})[0].argmax(1)
        assert variants[name].accuracy == pytest.approx(float(np.mean(pred == data.labels)), abs=1e-12)


def test_second_build_reuses_every_file(built_zoo):
    before = {p.name: p.stat().st_mtime_ns for p in (built_zoo / "models").iterdir()}
    accuracy = {v.name: v.accuracy for v in list_variants(built_zoo)}
    lines: list[str] = []
    variants = build_zoo(built_zoo, progress=lines.append)
    assert len(lines) == 18 and all(line.startswith("cached") for line in lines), lines
    assert {p.name: p.stat().st_mtime_ns for p in (built_zoo / "models").iterdir()} == before
    assert {v.name: v.accuracy for v in variants} == accuracy


def test_a_rebuild_counts_the_compute_a_manifest_written_before_it_lacks(built_zoo, tmp_path):
    old = tmp_path / "zoo"
    shutil.copytree(built_zoo, old)
    entries = load_entries(old)
    save_entries(old, [e.model_copy(update={"gflops": 0.0}) for e in entries])  # as written before the field
    lines: list[str] = []
    rebuilt = {v.name: v.gflops for v in build_zoo(old, progress=lines.append)}
    assert all(line.startswith("cached") for line in lines), lines  # nothing retrained or re-exported
    assert rebuilt == {e.name: e.gflops for e in entries} and all(g > 0 for g in rebuilt.values())


def test_get_variant_lists_known_names_on_a_miss(built_zoo):
    assert get_variant("cnn-l-int8", built_zoo).precision == "int8"
    with pytest.raises(ModelError, match="known: cnn-s-fp32, cnn-s-fp16"):
        get_variant("resnet-50", built_zoo)


def test_unknown_family_or_size_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="known: cnn, transformer"):
        build_zoo(tmp_path, families=["mlp"])
    with pytest.raises(ConfigError, match="sizes"):
        build_zoo(tmp_path, sizes=["xl"])
    assert not (tmp_path / MANIFEST).exists()


def test_list_is_empty_before_a_build(tmp_path):
    assert list_variants(tmp_path / "nothing") == []


def test_reading_the_zoo_does_not_import_torch(built_zoo):
    # workers, the tuner and flows list variants and make datasets; torch is only for building
    code = (
        "import sys; from oltunes.zoo import list_variants, get_variant, make_dataset; "
        f"assert len(list_variants({str(built_zoo)!r})) == 18; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
