"""The kernels' shared arithmetic against numpy's own, bit for bit (``oltunes.kernel_math``)."""

from __future__ import annotations

import math

import numpy as np

from oltunes.kernel_math import divide, pairwise_sum


def test_pairwise_sum_is_numpys_sum_across_its_blocks():
    """Sizes across numpy's blocks (a loop below 8, 8 accumulators up to 128, halving above), magnitudes spread
    wide, from offsets into a longer array."""
    rng = np.random.default_rng(3)
    for n in [0, *range(1, 140), 255, 256, 257, 1000, 1031, 4100, 8193, 20011]:
        a = rng.standard_normal(n + 5) * np.exp(rng.standard_normal(n + 5) * 6)
        for lo in (0, 3):
            part = a[lo:lo + n]
            assert 0.0 + pairwise_sum(a, lo, n) == float(np.add.reduce(part))
            assert pairwise_sum(part, 0, n) == pairwise_sum(a, lo, n)


def test_pairwise_sum_keeps_signed_zeros_as_numpy_does():
    for a in ([-0.0], [-0.0] * 9, [-0.0, 0.0], [0.0] * 3, []):
        x = np.array(a, dtype=float)
        got = 0.0 + pairwise_sum(x, 0, len(x))
        assert math.copysign(1.0, got) == math.copysign(1.0, float(np.add.reduce(x)))


def test_divide_is_numpys_division():
    values = [0.0, -0.0, 1.5, -2.0, math.inf, -math.inf, math.nan, 1e-308, 1e308]
    with np.errstate(all="ignore"):
        for a in values:
            for b in values:
                want = np.float64(a) / np.float64(b)
                got = divide(a, b)
                assert np.float64(got).tobytes() == want.tobytes(), (a, b)  # NaNs too: sign and payload
