"""The simulator's percentiles, sums and means are numpy's, bit for bit (measurements feed the learner: no float
may move)."""

from __future__ import annotations

import numpy as np
import pytest

from collections import deque

from oltunes.percentile import mean, percentiles, quantiles, total


@pytest.mark.parametrize("seed", range(5))
def test_percentiles_equal_numpy_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(1, 3000)) if rng.random() < 0.1 else int(rng.integers(1, 200))
        x = (rng.lognormal(0.0, 1.0, n) * rng.choice([1e-3, 1.0, 1e3])).tolist()
        if rng.random() < 0.3:  # ties, as latencies rounded or repeated (shed requests at one threshold)
            x = [round(v, 1) for v in x]
        qs = (50, 95, 99) if rng.random() < 0.5 else (float(rng.uniform(0, 100)),)
        assert percentiles(x, qs) == np.percentile(np.asarray(x), qs).tolist()


@pytest.mark.parametrize("seed", range(3))
def test_quantiles_equal_numpy_bit_for_bit(seed):
    """As the tuner asks them: a window (deque) of recent figures, often tied at 0 (no burst), one quantile."""
    rng = np.random.default_rng([seed, 3])
    for _ in range(400):
        n = int(rng.integers(1, 3000)) if rng.random() < 0.1 else int(rng.integers(1, 20))
        x = deque(np.where(rng.random(n) < 0.3, 0.0, rng.lognormal(0.0, 2.0, n)).tolist(), maxlen=n)
        qs = (0.9,) if rng.random() < 0.5 else tuple(rng.uniform(0, 1, 2).tolist())
        assert quantiles(x, qs) == np.quantile(np.fromiter(x, float, len(x)), qs).tolist()


def test_percentiles_of_an_empty_sample_refuse():
    with pytest.raises(ValueError, match="empty"):
        percentiles([], (50,))


@pytest.mark.parametrize("seed", range(5))
def test_total_and_mean_equal_numpy_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(1, 3000)) if rng.random() < 0.1 else int(rng.integers(1, 300))
        a = rng.lognormal(0.0, 1.0, n) * rng.choice([1e-3, 1.0, 1e3])
        for x in (a, a.tolist()):  # the engine passes both: batch latencies as a list, request waits as an array
            assert total(x) == float(np.sum(x)) and type(total(x)) is float
            assert mean(x) == float(np.mean(x)) and type(mean(x)) is float
