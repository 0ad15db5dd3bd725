"""A streaming request's waits over the whole candidate grid in one compiled pass (``Estimator._request_latency``):
the batch-fill wait, Kingman's queueing wait (``candidates.queue_wait_ms``) and their sum, which numpy computes in
about ten passes over the grid with as many temporaries, once per scored grid.

The same operations in the same order as those numpy expressions (``tests/tuner/test_wait_kernels.py`` checks it
bit for bit); the one logarithm, ln 100, is numpy's, passed in.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jit import compiled
from oltunes.kernel_math import divide

__all__ = ["request_waits"]


@compiled
def request_waits(batch_lat: np.ndarray, thr: np.ndarray, fill: np.ndarray, conc: np.ndarray, rate: float,
                  queueing: bool, burst: float, ln100: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(req, queue, req + queue) over (P, V, B, C): ``req = batch_lat + fill[b]``; with ``queueing``,
    ``queue = batch_lat / conc[c] * rho / (1 - rho) * burst / 2 * ln100``, ``rho = min(rate / thr, 0.999)``
    (``burst`` = 1 + burstiness), else 0 (``queue`` then comes back empty)."""
    P, V, B, C = batch_lat.shape
    req = np.empty((P, V, B, C))
    queue = np.empty((P, V, B, C) if queueing else (0, 0, 0, 0))
    total = np.empty((P, V, B, C))
    for p in range(P):
        for v in range(V):
            for b in range(B):
                for c in range(C):
                    lat = batch_lat[p, v, b, c]
                    r = lat + fill[b]
                    q = 0.0
                    if queueing:
                        rho = divide(rate, thr[p, v, b, c])
                        if not (rho <= 0.999 or math.isnan(rho)):  # np.minimum: NaN propagates
                            rho = 0.999
                        q = lat / conc[c] * rho / (1.0 - rho) * burst / 2.0 * ln100
                        queue[p, v, b, c] = q
                    req[p, v, b, c] = r
                    total[p, v, b, c] = r + q
    return req, queue, total
