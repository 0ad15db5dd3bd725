"""FTML's rule (``oltunes.learner.ftml``), compiled: the update of one coordinate (or of arrays of them, element-wise),
and the row path's step over a parameter table's active rows in one call.

Why compiled: the FM takes two row steps per observation and replay (its weights, its latents), each ~15 numpy calls
on a handful of rows; at cluster scale (``benchmarks.sim_speed``, 1,000 devices) their per-call overhead was ~2 of
the ~11 s the tuner spent learning. What it must equal: the numpy formulation, bit for bit (the same IEEE operations
in the same order: no ``fastmath``, so no fused multiply-add or reassociation; ``sqrt`` is correctly rounded
everywhere); ``tests/learner/test_fm_step_equivalence.py`` keeps the numpy step as the reference. Compiled lazily
and cached on disk (``oltunes.jit.compiled``).
"""

from __future__ import annotations

import numpy as np

from oltunes.jit import compiled

__all__ = ["ftml_rows", "ftml_rule"]


@compiled
def ftml_rule(theta, g, p1, p2, v, d_prev, z, lr, b1, b2, eps):
    """One FTML step of ``theta`` given gradient ``g``, ``p1, p2 = beta_1**t, beta_2**t`` and the state ``v, d, z``
    (``FTML``'s docstring gives the formulas); scalars or arrays alike. Returns (theta, v, d, z)."""
    v = b2 * v + (1.0 - b2) * g * g
    d = (1.0 - p1) / lr * (np.sqrt(v / (1.0 - p2)) + eps)
    sigma = d - b1 * d_prev
    z = b1 * z + (1.0 - b1) * g - sigma * theta
    return -z / d, v, d, z


@compiled
def ftml_rows(table, rows, g, ts, v, d, z, p1s, p2s, lr, b1, b2, eps):
    """``FTML.step_rows``: ``table[rows]`` (rows unique) and their state (``ts`` step counts, ``v, d, z`` shaped like
    the table) updated in place given the rows' gradients ``g``, the powers read from ``p1s, p2s`` (``beta**k``
    for k = 0, 1, ...). Returns False, changing nothing, when a row's next step count is beyond the tables."""
    for r in rows:
        if ts[r] + 1 >= len(p1s):
            return False
    n, m = table.shape[0], table.size // max(table.shape[0], 1)
    tf, vf, df, zf = table.reshape((n, m)), v.reshape((n, m)), d.reshape((n, m)), z.reshape((n, m))
    gf = g.reshape((len(rows), m))
    for i in range(len(rows)):
        r = rows[i]
        t = ts[r] + 1
        ts[r] = t
        p1, p2 = p1s[t], p2s[t]
        for j in range(m):
            tf[r, j], vf[r, j], df[r, j], zf[r, j] = ftml_rule(tf[r, j], gf[i, j], p1, p2, vf[r, j], df[r, j],
                                                               zf[r, j], lr, b1, b2, eps)
    return True
