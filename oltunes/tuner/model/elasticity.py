"""Batch elasticity: how much faster or slower than its kind's other accelerators an accelerator's latency grows with
batch size, one coefficient per accelerator and target, learnt by the pooled correction.

The correction's variant side shares a variant's batch shape across every accelerator of a kind, with weight 1. It
need not: on the Proteus measurements, the Ampere GPU's log latency grows from batch 1 to 16 by ~0.6x what the Pascal
GPU's does for compute-bound variants (YOLOv5: +1.6-1.9 vs +2.1-2.5), and both stay flat for overhead-bound ones
(BERT, GPT-2, T5). So the correction adds, per configuration on accelerator ``a``::

    e(a) x ( g(v, b, c) - mean over the kind's measured batch sizes of g(v, ., c) )

with ``g`` the kind's growth from batch 1 as the correction sees it (the prior's own growth, ``growth``, scaled by
the family's growth scale (``tuner.growth_scale``), plus the shape effect) and ``e(a)`` a ridge coefficient
(pseudo-count ``ELASTICITY_K``), taken relative to the kind's
accelerators (their measurement-weighted mean is 0: a common tilt belongs to the shape effects). Centring per variant
keeps the term a tilt: it moves no variant's average level, which the accelerator x variant effects carry.
"""

from __future__ import annotations

import numpy as np

from oltunes.jsonstate import pack_floats, unpack_floats
from oltunes.profiles import accelerator_kind
from oltunes.tuner.model.correction_fit import slopes_within_kind
from oltunes.types import Variant

__all__ = ["ELASTICITY_K", "BatchElasticity", "centre_key"]

# A tilt explains every variant on an accelerator at once, so little evidence should move it: measured on the
# held-out-accelerator split (benchmarks/heldout_accelerator.py), pseudo-counts 1, 0.1, 0.01, 0.001 gave 34.5, 31.3,
# 30.9, 30.9 % MAPE for the correction alone (36.5 without the term; measured on a prototype refitting it every round).
ELASTICITY_K = 0.01
BOUNDS = (-0.9, 1.0)  # coefficient = elasticity - 1


def centre_key(acc: str, v: Variant, conc: int) -> str:
    """The batch elasticity's centring group: a variant at one concurrency on a kind."""
    return f"{accelerator_kind(acc)}/{v.name}/{conc}"


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` with at least ``n`` columns (zeros appended, capacity doubled)."""
    if a.shape[-1] >= n:
        return a
    return np.concatenate([a, np.zeros((*a.shape[:-1], max(n, 2 * a.shape[-1], 16) - a.shape[-1]), a.dtype)], -1)


class BatchElasticity:
    """Per-accelerator coefficients on the centred batch growth (module docstring); owned by ``PooledCorrection``,
    its centred growth and coefficients refitted in its slopes block (``correction_fit``)."""

    def __init__(self, n_targets: int, k: float = ELASTICITY_K) -> None:
        self.n_targets = n_targets
        self.k = k
        self.growth = np.zeros((n_targets, 0))  # the prior's growth from batch 1, per shape group
        self.centre = np.zeros(0, dtype=np.intp)  # per shape group: its (kind, variant, concurrency)
        self.centre_ids: dict[str, int] = {}
        self.n_groups = 0
        self.coef = np.zeros((n_targets, 0))  # per accelerator group
        self.x = np.zeros((n_targets, 0))  # centred growth per shape group, as of the last fit
        self.mean = np.zeros((n_targets, 0))  # per centre, as of the last fit

    def add_group(self, g: int, centre_key: str, growth: np.ndarray | None) -> None:
        """A new shape group ``g`` (groups come in order) of the variant/concurrency ``centre_key``."""
        self.growth = _grown(self.growth, g + 1)
        self.centre = _grown(self.centre, g + 1)
        self.x = _grown(self.x, g + 1)
        if growth is not None:
            self.growth[:, g] = growth
        self.centre[g] = self.centre_ids.setdefault(centre_key, len(self.centre_ids))
        self.n_groups = g + 1

    def coefficients(self, n_acc: int) -> np.ndarray:
        self.coef = _grown(self.coef, n_acc)
        return self.coef[:, :n_acc]

    def fit(self, x_cell: np.ndarray, N: np.ndarray, residual_sums: np.ndarray, acc_of_cell: np.ndarray,
            kind_of_acc: np.ndarray) -> None:
        """Ridge coefficients given everything else (``residual_sums``: the cells' sums minus N x the rest), then
        centred per kind by their weights."""
        # bounded to a latency growing 0.1-2x as fast as the kind's: a first full-batch measurement of a new
        # accelerator, before the other effects have taken their share of its residual, must not tilt it wildly
        slopes = slopes_within_kind(x_cell, N, residual_sums, acc_of_cell, kind_of_acc, self.k)
        self.coefficients(len(kind_of_acc))[:] = np.clip(slopes, *BOUNDS)

    def centre_growth(self, shape: np.ndarray) -> np.ndarray:
        """The growth per shape group as the correction predicts it (the prior's + ``shape``, the shape effects and
        the scaled growth, (T, shape groups)), less its mean per centre: kept as ``x`` (and the means as ``mean``)."""
        n, h = self.n_groups, self.centre[: self.n_groups]
        growth = self.growth[:, :n] + shape[:, :n]
        H, T = len(self.centre_ids), self.n_targets
        flat = (h[None, :] + H * np.arange(T)[:, None]).ravel()
        self.mean = np.bincount(flat, growth.ravel(), T * H).reshape(T, H) / np.maximum(np.bincount(h, minlength=H), 1)
        self.x[:, :n] = growth - self.mean.take(h, axis=1)
        return self.x[:, :n]

    def term(self, acc_group: int | None, shape_group: int | None, centre_key: str,
             growth: np.ndarray | None) -> np.ndarray | float:
        """The tilt of one configuration: ``growth`` (the prior's) stands in where its kind has no shape group."""
        if acc_group is None or acc_group >= self.coef.shape[1]:
            return 0.0
        if shape_group is not None and shape_group < self.n_groups:
            x = self.x[:, shape_group]
        else:
            h = self.centre_ids.get(centre_key)
            if h is None or growth is None or h >= self.mean.shape[1]:
                return 0.0
            x = np.asarray(growth, dtype=float) - self.mean[:, h]
        return self.coef[:, acc_group] * x

    def state_dict(self) -> dict:
        n = self.n_groups
        return {"growth": pack_floats(self.growth[:, :n]), "coef": pack_floats(self.coef),
                "x": pack_floats(self.x[:, :n]), "mean": pack_floats(self.mean)}

    def load(self, d: dict) -> None:
        """Restore after the shape groups were recreated in order (``add_group``), exactly as saved."""
        T, n = self.n_targets, self.n_groups
        growth, x = (unpack_floats(d[k]).reshape(T, -1) for k in ("growth", "x"))
        if growth.shape[1] == n and x.shape[1] == n:
            self.growth[:, :n], self.x[:, :n] = growth, x
            self.coef = unpack_floats(d["coef"]).reshape(T, -1).copy()
            self.mean = unpack_floats(d["mean"]).reshape(T, -1).copy()
