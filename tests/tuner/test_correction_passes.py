"""The pooled correction's tree passes on raveled tables, laid out once per fit (``correction_trees._passes``),
against the plain passes on the 2-D (target, group) tables: bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oltunes.tuner.correction import PooledCorrection
from oltunes.types import Variant
from tests.tuner.test_correction import _RebuiltEachFit


class _PlainPasses(PooledCorrection):
    """Reference: the tree passes and the families' centring on the 2-D (target, group) tables, one bincount and
    one lookup per level (what ``_fit_tree`` ran before its passes were laid out raveled once per fit)."""

    def _fit_tree(self, tree, st, counts, s_cell, mu_den=None):
        T = self.n_targets
        sums = {}
        s = self._leaf_sum(tree, st, s_cell)
        for level in range(len(tree) - 1, -1, -1):
            e = tree[level]
            sums[e] = s
            if level:
                s = self._sum_by(st["up"][e], s * counts[e][2], T)
        change = 0.0
        if mu_den is not None:
            mu = (s * counts[tree[0]][2]).sum(axis=1) / mu_den
            change = float(np.abs(mu - self._mu).max())
            self._mu = mu
            cum, levels = mu[:, None], tree
        else:
            cum = self._effects[tree[0]] = sums[tree[0]] / counts[tree[0]][3]
            levels = tree[1:]
        for e in levels:
            _, k, _, n_plus_k = counts[e]
            up = cum.take(st["parent"][e], axis=1)
            cum = (sums[e] + k * up) / n_plus_k
            self._effects[e] = cum - up
        if st["cell_is_cfg"] and tree[-1] == "cfg":
            return cum, change
        return cum.take(st["idx"][tree[-1]], axis=1), change

    def _centre_families(self, st, weights):
        n_fam, n, has = weights
        s = self._sum_by(st["up"]["fam_kind"], n_fam * self._effects["fam"], self.n_targets)
        shift = np.divide(s, n, out=np.zeros_like(s), where=has)
        self._effects["fam"] -= shift.take(st["parent"]["fam_kind"], axis=1)
        self._effects["kind"] += shift
        return shift


class _PlainPassesRebuilt(_PlainPasses, _RebuiltEachFit):
    """The plain passes over rebuilt index arrays (no configuration-is-its-own-group shortcut)."""


@pytest.mark.parametrize("fast_cls, ref_cls", [(PooledCorrection, _PlainPasses),
                                               (_RebuiltEachFit, _PlainPassesRebuilt)])
@pytest.mark.parametrize("seed", [0, 1])
def test_raveled_tree_passes_fit_bit_for_bit_as_plain_ones(fast_cls, ref_cls, seed):
    """A random stream, one measurement or a chunk at a time, with the batch elasticity and growth scale in play:
    every before/after, the effects, ``mu`` and the grid equal, to the bit, those of the plain 2-D passes."""
    rng = np.random.default_rng([seed, 11])
    accs = ["t4", "a100", "p100", "cpu"]
    variants = [Variant(family=f"f{i % 3}", name=f"v{i}", size="s", accuracy=0.5) for i in range(7)]
    fast, ref = fast_cls(n_targets=3, root_k=2.0), ref_cls(n_targets=3, root_k=2.0)
    for i in range(160):
        chunk = []
        for _ in range(int(rng.integers(1, 5))):
            acc, v, b = accs[rng.integers(len(accs))], variants[rng.integers(len(variants))], int(rng.choice([1, 4, 8]))
            growth = np.array([0.6, -0.3, 1.1]) * math.log(b) + rng.normal(0, 0.05, 3)
            chunk.append((acc, v, b, int(rng.choice([1, 2])), rng.normal(0, 1, 3), rng.random(3) > 0.15, growth,
                          bool(rng.random() > 0.3)))
        got, want = fast.learn_many(chunk), ref.learn_many(chunk)
        for a, b in zip(got[0] + got[1], want[0] + want[1]):
            assert a.tobytes() == b.tobytes()
        assert fast._mu.tobytes() == ref._mu.tobytes()
        assert all(fast._effects[e].tobytes() == ref._effects[e].tobytes() for e in fast._effects)
    assert fast._tilt_fits > 0 and np.any(fast.scale.coef != 0)  # the third block did move
    assert np.array_equal(fast.grid(accs, variants, [1, 4, 8], [1, 2]), ref.grid(accs, variants, [1, 4, 8], [1, 2]))
