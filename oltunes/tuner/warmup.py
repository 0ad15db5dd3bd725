"""Compile, or load from the cache, the tuner's kernels (``oltunes.jit``) before a request needs them.

The first fit of a process compiles the pooled correction's and FTML's kernels (~12 s of CPU when their cache is cold:
the first start after an install or an upgrade, every start of a read-only install without a writable home) or loads
them (~0.2 s). The tuning service runs this before it serves (``service.create_app``), so no client's first
``observe`` or ``recommend`` waits for a compiler past its timeout. The stream below takes every kernel's path with
the types the tuner passes (``tests/tuner/test_correction_kernels.py`` checks nothing is compiled after it).
"""

from __future__ import annotations

import numpy as np

from oltunes.learner.ftml import FTML
from oltunes.tuner.correction import PooledCorrection
from oltunes.types import Variant

__all__ = ["warm_up"]


def warm_up(n_targets: int = 3) -> None:
    """A few measurements through a throwaway correction (growth, full batches, a variant of known intensity) and a
    step of FTML's row path on a weight table and a latent table."""
    v = Variant(family="warm", name="warm-up", size="s", accuracy=0.5, params=10**6, gflops=1.0)
    on, y = np.ones(n_targets, dtype=bool), np.zeros(n_targets)
    pc = PooledCorrection(n_targets=n_targets)
    pc.learn_many([(acc, v, b, 1, y, on, np.full(n_targets, 0.1 * b), True) for acc in ("cpu", "t4") for b in (1, 2)])
    opt, rows = FTML(), np.array([0], dtype=np.intp)
    for shape in ((2, n_targets), (2, n_targets, 2)):
        opt.step_rows(np.zeros(shape), rows, np.ones((1, *shape[1:])))
