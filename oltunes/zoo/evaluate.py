"""Accuracy of an ONNX file, measured by running it in ONNX Runtime (never copied from torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from oltunes.errors import DataError
from oltunes.worker.dataset import Dataset
from oltunes.worker.session import ModelSession, predictions


def measure_accuracy(model: Path | ModelSession, data: Dataset, batch_size: int = 256) -> float:
    """Fraction of `data` whose predicted class equals its label."""
    if data.labels is None:
        raise DataError("the evaluation set has no 'label' array/column; accuracy needs labels")
    session = model if isinstance(model, ModelSession) else ModelSession(Path(model), threads=1, device="cpu")
    x = session.prepare(data.x)
    hits = 0
    for i in range(0, len(x), batch_size):
        hits += int(np.sum(predictions(session.run(x[i : i + batch_size])) == data.labels[i : i + batch_size]))
    return hits / len(x)
