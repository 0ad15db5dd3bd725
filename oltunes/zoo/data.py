"""The zoo's data: scikit-learn's handwritten digits (ships with the package, no download).

One seeded stratified split gives a training set, a held-out evaluation set (every variant's accuracy is
measured on it) and a calibration subset of the training set for int8 quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oltunes.config import get_settings
from oltunes.errors import ConfigError
from oltunes.types import Variant
from oltunes.worker.dataset import Dataset, write_dataset
from oltunes.zoo.spec import INPUT_SHAPE

TEST_FRACTION = 0.3
CALIBRATION_ITEMS = 256


@dataclass(frozen=True)
class Split:
    train: Dataset
    test: Dataset

    def calibration(self, n: int = CALIBRATION_ITEMS) -> np.ndarray:
        return self.train.x[:n]


def digits_split(seed: int = 0) -> Split:
    """Seeded stratified split of the digits; ids are the row numbers of `load_digits`."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32).reshape(-1, *INPUT_SHAPE)
    y = digits.target.astype(np.int64)
    ids = np.arange(len(y), dtype=np.int64)
    tr, te = train_test_split(ids, test_size=TEST_FRACTION, random_state=seed, stratify=y)
    return Split(Dataset(ids[tr], x[tr], y[tr]), Dataset(ids[te], x[te], y[te]))


def _families() -> list[str]:
    from oltunes.zoo.families import (
        Family,  # torch: only when a family name must be checked
    )

    return Family.known()


def make_dataset(family_or_variant: object, n: int, path: Path | str, seed: int = 0) -> Path:
    """Write an input dataset of `n` labelled items drawn from the held-out split, for demos and tests.

    Parameters
    ----------
    family_or_variant
        A family name, a `Variant` or None. Every shipped variant takes the same input, so this only checks
        that a zoo model can consume the data (a registered user model with another input shape cannot).
    n
        Items to write; ids are 0..n-1. More items than the held-out split holds are drawn with replacement.
    path
        ``.npz`` or ``.parquet`` (columns ``id``, ``x``, ``label``).
    seed
        Draw order; the same seed gives the same file contents.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = make_dataset("cnn", 100, pathlib.Path(tempfile.mkdtemp()) / "in.npz")
    >>> import numpy as np; int(np.load(p)["x"].shape[0])
    100
    """
    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")
    family = family_or_variant.family if isinstance(family_or_variant, Variant) else family_or_variant
    if family is not None and family not in _families():
        raise ConfigError(
            f"make_dataset: {family!r} is not a zoo family ({', '.join(_families())}); zoo data only fits zoo models"
        )
    test = digits_split(get_settings().seed).test
    rng = np.random.default_rng(seed)
    rows = rng.permutation(len(test))[:n] if n <= len(test) else rng.integers(0, len(test), size=n)
    return write_dataset(Path(path), Dataset(np.arange(n, dtype=np.int64), test.x[rows], test.labels[rows]))
