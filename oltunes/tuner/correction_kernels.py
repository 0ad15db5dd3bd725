"""Compiled kernel of the pooled correction (``oltunes.tuner.correction``) per configuration: measurements into
their configurations' sums. (The fit's kernels, and the known configurations' corrections read around a fit:
``oltunes.tuner.fit_kernels``, whose docstring says what every kernel here must equal and why: bit for bit the numpy
formulation, ``tests/tuner/correction_reference.py``.)

Compiled lazily and cached on disk (``oltunes.jit.compiled``).
"""

from __future__ import annotations

from oltunes.jit import compiled

__all__ = ["add_measurements"]


@compiled
def add_measurements(sums, counts, tilt_counts, cells, ys, masks, full, decay):
    """Measurements, in order, into their configurations' decayed sums, counts and full-batch counts (T, columns),
    in place (``PooledCorrection._add_all``): for each measured target, ``decay · s + y``, ``decay · n + 1`` and
    ``decay · f + full``; unmeasured ones left as they are. ``cells``: each measurement's column; ``ys, masks``:
    (measurements, T); ``full``: 1.0 for a measurement of full batches, else 0.0."""
    for i in range(len(cells)):
        j = cells[i]
        for t in range(sums.shape[0]):
            if masks[i, t]:
                sums[t, j] = decay * sums[t, j] + ys[i, t]
                counts[t, j] = decay * counts[t, j] + 1.0
                tilt_counts[t, j] = decay * tilt_counts[t, j] + full[i]
