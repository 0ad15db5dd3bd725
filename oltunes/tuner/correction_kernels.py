"""Compiled kernels of the pooled correction (``oltunes.tuner.correction``) per configuration: measurements into
their configurations' sums, and known configurations' corrections as the effects stand. (The fit's kernels:
``oltunes.tuner.fit_kernels``, whose docstring says what every kernel here must equal and why: bit for bit the numpy
formulation, ``tests/tuner/correction_reference.py``.)

Compiled lazily and cached on disk (``oltunes.jit.compiled``).
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled

__all__ = ["add_measurements", "cell_corrections"]


@compiled
def cell_corrections(cells, idx, eff, eff_at, mu, elastic, scale, intensity):
    """The corrections (configurations, T) of known configurations ``cells`` as the effects stand
    (``PooledCorrection._current`` by column): ``mu`` + each effect of its groups (``idx``: the group per
    configuration of each effect, (effects, configurations); ``eff_at`` where each effect starts in ``eff``), added in
    that order, + the batch
    elasticity's tilt (``elastic``: coef, x, shape groups; 0.0 for an accelerator beyond its coefficients), + the
    family growth scale x the prior's growth (``scale``: coef, the growth per shape group; 0.0 beyond its
    coefficients), + the intensity slope's term where any intensity is known (``intensity``: active, coef, mean, x
    and known per configuration; 0.0 for an accelerator beyond its slopes or a variant of unknown intensity)."""
    el_coef, el_x, n_shapes = elastic
    s_coef, growth = scale
    active, i_coef, i_mean, i_x, i_known = intensity
    T = len(mu)
    out = np.empty((len(cells), T))
    for i in range(len(cells)):
        j = cells[i]
        acc, fam, shape = idx[1, j], idx[2, j], idx[4, j]
        for t in range(T):
            v = mu[t]
            for e in range(idx.shape[0]):
                v = v + eff[t, eff_at[e] + idx[e, j]]
            v = v + (el_coef[t, acc] * el_x[t, shape] if acc < el_coef.shape[1] and shape < n_shapes else 0.0)
            v = v + (s_coef[t, fam] if fam < s_coef.shape[1] else 0.0) * growth[shape]
            if active:
                v = v + (i_coef[t, acc] * (i_x[j] - i_mean[t, acc]) if acc < i_coef.shape[1] and i_known[j] else 0.0)
            out[i, t] = v
    return out


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
