"""``lexsort_first`` (the selection's tie-breaks without a full sort) is ``np.lexsort(keys)[0]`` on keys with many
ties, NaNs, infinities, signed zeros and boolean keys, as the selection's are."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner.selection import lexsort_first


def _key(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.integers(4)
    if kind == 0:
        return rng.random(n) < 0.5  # a boolean key (fails a hard constraint)
    if kind == 1:
        return rng.integers(0, 3, n)  # few distinct values: many ties
    pool = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 0.25])
    v = pool[rng.integers(len(pool), size=n)] if kind == 2 else rng.normal(size=n)
    if kind == 3 and rng.random() < 0.5:
        v[rng.random(n) < 0.2] = np.nan
    if rng.random() < 0.1:
        v[:] = np.nan  # a key that is NaN everywhere ties everything
    return v


@pytest.mark.parametrize("seed", range(300))
def test_lexsort_first_is_the_first_of_lexsort(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    keys = tuple(_key(rng, n) for _ in range(int(rng.integers(1, 6))))
    assert lexsort_first(keys) == int(np.lexsort(keys)[0])
