"""Looping a trace over the run: only the copies' parts that can land in the window are computed, and the
arrivals are the ones tiling every copy whole gives, float for float (the workload, hence every run, must not move)."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.sim.workload import _loop


def tiled_whole(base: np.ndarray, duration_s: float, offset: float) -> np.ndarray:
    """The plain way: every copy of the trace, shifted, then the window."""
    span = float(base[-1]) + float(np.mean(np.diff(base))) if len(base) > 1 else float(base[-1]) + 1.0
    copies = int(np.ceil((duration_s + offset) / span)) + 1
    tiled = (base[None, :] + span * np.arange(copies)[:, None]).ravel() - offset
    return tiled[(tiled >= 0) & (tiled < duration_s)]


@pytest.mark.parametrize("seed", range(4))
def test_loop_equals_tiling_every_copy(seed):
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.integers(1, 3000))
        # traces with ties and coarse timestamps (millisecond arrivals), windows shorter and longer than the trace
        base = np.sort(np.round(rng.uniform(0, rng.uniform(0.1, 500), n), int(rng.integers(0, 4))))
        if base[-1] == 0:
            continue
        duration = float(rng.uniform(0.01, 1000))
        offset = float(rng.uniform(0, base[-1])) if rng.random() < 0.9 else 0.0
        got, want = _loop(base, duration, offset), tiled_whole(base, duration, offset)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_loop_of_an_empty_trace_is_empty():
    assert len(_loop(np.zeros(0), 10.0, 0.0)) == 0
