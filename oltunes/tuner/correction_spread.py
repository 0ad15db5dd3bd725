"""How sure the pooled correction is of one configuration: the posterior standard deviation of its correction, for
exploration bounded by SLO risk (measured, not used by selection yet: docs/measurements.md, issue 9).

Each tree's part is exact for its nested levels (``var = 1 / (n + k) + (k / (n + k))^2 var(parent)``); the two sides
are added as if independent (an approximation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from oltunes.tuner.correction_trees import (
    ACCELERATOR_TREE,
    EFFECTS,
    VARIANT_TREE,
    groups_of,
)
from oltunes.types import Variant

if TYPE_CHECKING:
    from oltunes.tuner.correction import PooledCorrection

__all__ = ["posterior_spread"]


def posterior_spread(pc: PooledCorrection, acc: str, v: Variant, batch: int, conc: int) -> np.ndarray:
    """Posterior standard deviation (n_targets,) of one configuration's correction, in units of the noise of one
    measurement (x the log noise SD: the SD of the log correction). About ``1/sqrt(root_k)`` plus the effects'
    own spread for a configuration nothing near was measured; ``~1/sqrt(n)`` once measured n times."""
    pc._fit()
    keys = dict(zip(EFFECTS, groups_of(acc, v, batch, conc)))
    total = np.zeros(pc.n_targets)
    for tree in (ACCELERATOR_TREE, VARIANT_TREE):
        counts = pc._fit_counts.get(tree, {})
        if tree is ACCELERATOR_TREE:  # the overall offset: the prior's evidence + what the top groups carry
            n_top, _, share, _ = counts.get(tree[0], (np.zeros((pc.n_targets, 0)), 0.0, 0.0, 0.0))
            var = 1.0 / ((n_top * share).sum(axis=1) + pc.root_k)
        else:
            var = np.zeros(pc.n_targets)
        for e in tree:
            k = min(pc.effect_k[e], 1e12)
            g = pc._gid[e].get(keys[e])
            n = counts[e][0][:, g] if e in counts and g is not None and g < counts[e][0].shape[1] else 0.0
            var = 1.0 / (n + k) + (k / (n + k)) ** 2 * var
        total += var
    return np.sqrt(total)
