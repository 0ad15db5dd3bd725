"""Bring your own model: register any ONNX file plus a labelled evaluation set as a zoo variant."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from pydantic import ValidationError

from oltunes.atomic import atomic_write
from oltunes.errors import ConfigError, DataError, ModelError, invalid
from oltunes.types import Variant
from oltunes.worker.dataset import read_dataset
from oltunes.worker.session import ModelSession
from oltunes.zoo.evaluate import measure_accuracy
from oltunes.zoo.manifest import (
    ZooEntry,
    load_entries,
    locked,
    model_fields,
    save_entries,
    zoo_dir_or_default,
)


def register_variant(
    onnx_path: Path | str,
    eval_path: Path | str,
    family: str,
    size: str,
    precision: str = "fp32",
    name: str | None = None,
    zoo_dir: Path | str | None = None,
) -> Variant:
    """Add a user's ONNX model to the zoo; its accuracy is measured on the labelled evaluation set given.

    The model and the evaluation set are copied into ``<zoo_dir>/user/`` so the zoo stays self-contained.
    Re-registering a user variant under the same name replaces it; shipped variant names are refused.
    """
    zoo_dir = zoo_dir_or_default(zoo_dir)
    onnx_path, eval_path = Path(onnx_path), Path(eval_path)
    name = name or f"{family}-{size}-{precision}"
    try:  # validate the labels before any file is copied
        Variant(family=family, name=name, size=size, precision=precision, accuracy=0.0)
    except ValidationError as e:
        raise invalid(e, "register_variant") from e
    data = read_dataset(eval_path)
    if data.labels is None:
        raise DataError(f"evaluation set {eval_path} has no 'label'; accuracy cannot be measured without labels")
    session = ModelSession(onnx_path, threads=1, device="cpu")
    accuracy = measure_accuracy(session, data)
    try:  # parameters = elements of the non-scalar initializers (weights), as exported
        params = sum(int(np.prod(t.dims)) for t in onnx.load(str(onnx_path)).graph.initializer if len(t.dims))
    except Exception as e:  # ONNX Runtime loaded it, so this is rare (e.g. external data moved away)
        raise ModelError(f"model {onnx_path} could not be parsed by onnx: {e}") from e
    with locked(zoo_dir):
        entries = {e.name: e for e in load_entries(zoo_dir)}
        if name in entries and entries[name].source != "user":
            raise ConfigError(f"name {name!r} belongs to a shipped zoo variant; pass another name")
        user = zoo_dir / "user"
        model_dst = user / f"{name}.onnx"
        eval_dst = user / f"{name}.eval{eval_path.suffix.lower()}"
        for src, dst in ((onnx_path, model_dst), (eval_path, eval_dst)):
            if src.resolve() != dst.resolve():
                atomic_write(dst, lambda tmp, src=src: shutil.copyfile(src, tmp))
        entries[name] = ZooEntry(
            family=family,
            name=name,
            size=size,
            precision=precision,
            accuracy=accuracy,
            params=params,
            source="user",
            eval_set=str(eval_dst),
            eval_items=len(data),
            **model_fields(model_dst, session),
        )
        save_entries(zoo_dir, list(entries.values()))
    return entries[name].variant()
