"""Intensity slope: how much faster or slower than its kind's other accelerators an accelerator runs a variant of high
arithmetic intensity, one coefficient per accelerator and target, learnt by the pooled correction.

The correction's accelerator effect is one level per accelerator, shrunk towards what it measured. On the Proteus
measurements that level is a mean of two modes: most variants (BERT, GPT-2, T5, RoBERTa: ~2 FLOPs per parameter per
token) run ~1.5x slower on the Ampere GPU than on the Pascal one, the weight-reusing ALBERT-xlarge/xxlarge (one
layer's weights for all its layers) and YOLOv5 (a convolution reuses each weight over the image) up to 4x faster: a
faster GPU pays off where compute, not the per-kernel overhead, dominates. A variant's arithmetic intensity
``x(v) = log(FLOPs per item / parameters)`` is public architecture metadata (``Variant.gflops``, ``Variant.params``:
``oltunes.sim.variant_params``), so the correction adds, per configuration of variant ``v`` on accelerator ``a``::

    i(a) x ( x(v) - mean of x over a's measured configurations )

with ``i(a)`` a ridge coefficient (pseudo-count ``INTENSITY_K``) on what the other effects leave, taken relative to
the kind's accelerators (their weighted mean is 0: a slope common to the kind belongs to the variant effects, which
the kind's accelerators share), and the centring per accelerator keeps it a slope: it moves no accelerator's mean
level, which the accelerator effect carries. A variant whose intensity is unknown (``gflops`` or ``params`` 0) adds
nothing and teaches nothing; with none known the term is absent (the same floats as without it).

Fitted, as the family growth scale is, on the accelerator x variant groups' data with their own effects and their
configurations' integrated out (``correction_fit``): on the
configurations' raw residuals the accelerator x variant effects took most of each measured variant's deviation
first.

Measured (``learner_accuracy --split accelerator --seeds 20``, paired by seed against the correction without it):
the tuner's MAPE 31.3 -> 28.1 % (mean over seeds; -3.2 +- 0.6, lower in 18 of 20 seeds), its median APE unchanged
(17.2 -> 17.1 %, +-0.7); the correction alone 31.7 -> 28.2 % MAPE. What it cannot separate is within a family: ALBERT
base/large are as intense as xlarge/xxlarge (one shared layer each) yet stay in the slow mode, so an Ampere GPU's
measured ALBERT-xxlarge still makes ALBERT-base look too fast there. ``benchmarks.sim_quality`` (cold ``oltunes``,
seeds 0-8, 54 runs per group, paired per run): mean violations shipped +0.001 +- 0.007, held-out +0.004 +- 0.005:
no change the runs can tell.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.jsonstate import pack_floats, unpack_floats
from oltunes.tuner.model.correction_fit import slopes_within_kind
from oltunes.types import Variant

__all__ = ["INTENSITY_K", "IntensitySlope", "log_intensity"]

# A slope explains every variant of an accelerator at once, so a handful of measured variants should set it; the
# held-out-accelerator split (correction alone, 20 seeds, median MAPE) is flat around 1: pseudo-counts 0.1, 0.3, 1, 3,
# 10 gave 29.4, 29.1, 28.1, 28.3, 29.7 %.
INTENSITY_K = 1.0
BOUNDS = (-1.0, 1.0)  # log latency per log unit of intensity (the variants span ~5 log units)


def log_intensity(v: Variant) -> float | None:
    """``log(FLOPs per item / parameters)`` of a variant; None when either is unknown."""
    if v.gflops <= 0 or v.params <= 0:
        return None
    return math.log(v.gflops * 1e9 / v.params)


class IntensitySlope:
    """Per-accelerator coefficients on the centred log intensity (module docstring); owned by ``PooledCorrection``,
    indexed by its configurations and its "acc" groups."""

    def __init__(self, n_targets: int, k: float = INTENSITY_K) -> None:
        self.n_targets = n_targets
        self.k = k
        self.x = np.zeros(0)  # per configuration: its variant's log intensity (0 where unknown)
        self.known = np.zeros(0)  # per configuration: 1.0 where the intensity is known
        self.by_variant: dict[str, float] = {}  # variant name -> log intensity (for a restored correction)
        self._names: list[str] = []  # per configuration: its variant's name
        self.coef = np.zeros((n_targets, 0))  # per accelerator group
        self.mean = np.zeros((n_targets, 0))  # per accelerator group: the centre (weighted mean of x), last fit

    @property
    def active(self) -> bool:
        """Whether any configuration's intensity is known (else the term is left out entirely)."""
        return bool(self.by_variant)

    def add_cell(self, j: int, v: Variant) -> None:
        """Configuration ``j`` (they come in order) of variant ``v``."""
        if j >= len(self.x):
            grow = max(16, len(self.x))
            self.x, self.known = np.concatenate([self.x, np.zeros(grow)]), np.concatenate([self.known, np.zeros(grow)])
        self._names.append(v.name)
        x = self.by_variant.get(v.name)
        if x is None:
            self.see(v)
        else:
            self.x[j], self.known[j] = x, 1.0

    def see(self, v: Variant) -> None:
        """A variant measured again: its intensity, if first known now, reaches its configurations (those restored
        from a state saved without it, whose variants carry no figures)."""
        if v.name in self.by_variant:
            return
        x = log_intensity(v)
        if x is not None:
            self.by_variant[v.name] = x
            for i, name in enumerate(self._names):
                if name == v.name:
                    self.x[i], self.known[i] = x, 1.0

    def x_of(self, v: Variant) -> float | None:
        """``v``'s log intensity: its own figures', else what a restored state remembers of it (None: unknown)."""
        x = log_intensity(v)
        return self.by_variant.get(v.name) if x is None else x

    def term(self, acc_group: int | None, v: Variant) -> np.ndarray | float:
        """The term of a configuration of ``v`` on the accelerator group ``acc_group`` (0.0 where unknown)."""
        if acc_group is None or acc_group >= self.coef.shape[1]:
            return 0.0
        x = self.x_of(v)
        return 0.0 if x is None else self.coef[:, acc_group] * (x - self.mean[:, acc_group])

    def of_variants(self, acc_groups: np.ndarray, variants: list[Variant]) -> np.ndarray:
        """The term of every (accelerator group (-1: none), variant) pair (T, P, V): ``term`` vectorised (0.0 where
        ``term`` gives 0.0)."""
        T, A = self.n_targets, self.coef.shape[1]
        xs = [self.x_of(v) for v in variants]
        known = np.array([x is not None for x in xs], dtype=bool)
        fitted = (acc_groups >= 0) & (acc_groups < A)
        if not A:
            return np.zeros((T, len(acc_groups), len(variants)))
        x = np.array([0.0 if x is None else x for x in xs])
        a = np.where(fitted, acc_groups, 0)
        term = self.coef.take(a, axis=1)[:, :, None] * (x[None, None, :] - self.mean.take(a, axis=1)[:, :, None])
        return np.where(fitted[None, :, None] & known[None, None, :], term, 0.0)

    def fit(self, weights: np.ndarray, residual_sums: np.ndarray, acc_var_of_cell: np.ndarray,
            fam_of_acc_var: np.ndarray, acc_of_acc_fam: np.ndarray, kind_of_acc: np.ndarray) -> None:
        """Ridge slopes per accelerator given the accelerator x variant groups' ``weights`` and ``residual_sums``
        (T, groups), each group's log intensity its configurations' (``acc_var_of_cell``), centred per accelerator;
        an accelerator with no known intensity gets 0."""
        T, A, G = self.n_targets, len(kind_of_acc), weights.shape[1]
        n_cells = len(acc_var_of_cell)
        known_cells = self.known[:n_cells]
        n_known = np.bincount(acc_var_of_cell, known_cells, G)
        known = (n_known > 0).astype(float)
        x = np.divide(np.bincount(acc_var_of_cell, self.x[:n_cells] * known_cells, G), n_known,
                      out=np.zeros(G), where=n_known > 0)
        acc_of = acc_of_acc_fam.take(fam_of_acc_var)
        by_acc = (acc_of[None, :] + A * np.arange(T)[:, None]).ravel()
        n = weights * known
        n_acc = np.bincount(by_acc, n.ravel(), T * A).reshape(T, A)
        has = n_acc > 0
        mean = np.divide(np.bincount(by_acc, (n * x).ravel(), T * A).reshape(T, A), n_acc,
                         out=np.zeros_like(n_acc), where=has)
        xc = (x - mean.take(acc_of, axis=1)) * known
        slopes = slopes_within_kind(xc, weights, residual_sums, acc_of, kind_of_acc, self.k)
        self.coef = np.where(has, np.clip(slopes, *BOUNDS), 0.0)
        self.mean = mean

    def state_dict(self) -> dict:
        return {"by_variant": dict(self.by_variant), "coef": pack_floats(self.coef), "mean": pack_floats(self.mean)}

    def load(self, d: dict) -> None:
        """Restore after the configurations were recreated in order."""
        self.by_variant = {str(k): float(v) for k, v in d.get("by_variant", {}).items()}
        for j, name in enumerate(self._names):
            x = self.by_variant.get(name)
            if x is not None:
                self.x[j], self.known[j] = x, 1.0
        self.coef = unpack_floats(d["coef"]).reshape(self.n_targets, -1).copy()
        self.mean = unpack_floats(d["mean"]).reshape(self.n_targets, -1).copy()
