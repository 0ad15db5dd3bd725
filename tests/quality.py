"""Learner-quality assertions that hold on any machine: a metric over several seeds, judged by its median.

Floating point and library versions differ between machines, so a single seed against a tight ratio is a coin
toss. Every quality test computes its metric for SEEDS, prints the spread (visible with ``pytest -s`` and in the
failure message) and asserts on the median, with a margin chosen from the spread measured when it was written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)


def over_seeds(metric: Callable[[int], float], seeds: Sequence[int] = SEEDS) -> tuple[float, list[float]]:
    """``(median, per-seed values)`` of ``metric(seed)``; prints the spread."""
    values = [float(metric(s)) for s in seeds]
    med = float(np.median(values))
    print(f"{getattr(metric, '__name__', 'metric')}: median {med:.4g}, range {min(values):.4g}..{max(values):.4g}")
    return med, values
