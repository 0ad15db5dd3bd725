"""Pooled correction of the prior: crossed effects, exact where something was measured.

The prior can be wrong by a large common factor (the heuristic prior is 15-50x too fast for the ONNX Runtime
latencies behind the simulator), and wrong differently per accelerator and per model variant (it assumes an
Ampere GPU 5x faster than a Pascal one where ONNX Runtime measures it slower). The FM, one small gradient step per
observation, needs hundreds of observations to learn offsets that size. This correction learns the log residual
``r = log(measured) - log(prior)`` as a sum of crossed random effects (a Gaussian mixed model)::

    r(a, v, b, c) = mu + kind(a) + acc(a)                               accelerator side
                  + fam(k, f) + var(k, v) + shape(k, v, b, c)           variant side, shared by accelerators of kind k
                  + acc_fam(a, f) + acc_var(a, v) + cfg(a, v, b, c)     interactions, exact where measured

with ``k`` the accelerator's kind (CPU or GPU: ``oltunes.profiles.ACCELERATOR_SPECS``) and ``f`` the variant's family,
plus a per-(kind x family) scale on the prior's latency growth from batch 1 (``oltunes.tuner.model.growth_scale``: GPT-2
stays flat in batch where the prior grows it as b^0.75, and what one variant's measurements say of it reaches the
family's other variants and batch sizes), and a per-accelerator tilt on the kind's growth with batch size
(``oltunes.tuner.model.elasticity``: an Ampere GPU's latency grows with batch ~0.6x as fast as a Pascal one's for
compute-bound models), and a per-accelerator slope on the variant's arithmetic intensity, where its compute and size
are known (``oltunes.tuner.model.intensity``: the weight-reusing ALBERT and YOLOv5 run faster on an Ampere GPU than on a
Pascal one, most transformers slower).
Because the variant side is *crossed* with the accelerator side, one measurement of a variant on a Pascal GPU
moves that variant's prediction on every other GPU, and an accelerator's first measurements move every variant on
it (the "Pascal latency x per-accelerator ratio" rule is the special case of one variant effect plus one
accelerator effect). Each effect is shrunk towards 0 by a pseudo-count ``k`` (``EFFECT_K``: how many measurements
of its own a group needs to weigh as much as what the coarser effects say), the overall offset ``mu`` by the
prior's own evidence (``Prior.evidence``: how many measurements the prior is worth). A configuration measured n
times converges to what was measured.

The fit is exact ridge (posterior means) over per-configuration sufficient statistics, by backfitting (Gauss-Seidel
over the effects, warm-started, after each batch of measurements: ``oltunes.tuner.model.correction_fit``): a handful of
numpy ``bincount`` passes per round. Each configuration's decayed sums forget by ``decay`` per measurement of it, so recent
measurements dominate and drift is followed.

The FM then learns what is left (co-runner interference, what the effects cannot express).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from oltunes.tuner.model.correction_fit import MAX_ROUNDS, ROUNDS_PER_OBSERVATION, fit, intensity_per_cell
from oltunes.tuner.model.correction_grid import CorrectionGrid
from oltunes.tuner.model.correction_state import restore_into, state_of
from oltunes.tuner.model.correction_trees import EFFECTS, PARENTS, groups_of
from oltunes.tuner.model.elasticity import ELASTICITY_K, BatchElasticity, centre_key
from oltunes.tuner.model.growth_scale import GROWTH_SCALE_K, GROWTH_TARGET, GrowthScale
from oltunes.tuner.model.intensity import INTENSITY_K, IntensitySlope
from oltunes.types import Candidate, Variant

__all__ = ["EFFECTS", "EFFECT_K", "PooledCorrection"]

# Pseudo-count per effect: noise variance / the effect's variance.
# Shared effects (accelerator, variant on a kind) vary more than an accelerator's own interactions with a
# variant: most models keep their relative speed across GPUs (the Proteus measurements, Pascal vs Ampere).
# "elasticity": the batch elasticity's coefficients (``tuner.elasticity``); "growth_scale": the families' growth
# scales (``tuner.growth_scale``); "intensity": the accelerators' slopes on the variants' arithmetic intensity
# (``tuner.intensity``).
EFFECT_K: dict[str, float] = {"kind": 0.1, "acc": 0.1, "fam": 0.1, "var": 0.1, "shape": 0.1,
                              "acc_fam": 1.0, "acc_var": 1.0, "cfg": 1.0, "elasticity": ELASTICITY_K,
                              "growth_scale": GROWTH_SCALE_K, "intensity": INTENSITY_K}


def _set_grown(a: np.ndarray, i: int, value: int) -> np.ndarray:
    """``a[i] = value``, first doubling ``a``'s capacity if needed (amortised O(1) appends)."""
    if i >= len(a):
        a = np.concatenate([a, np.zeros(max(16, len(a)), dtype=a.dtype)])
    a[i] = value
    return a


class PooledCorrection:
    """Crossed random effects on log residuals, per target (module docstring).

    Parameters
    ----------
    n_targets
        Targets learned side by side (a measurement may lack some: see ``mask``).
    root_k
        Pseudo-count of the prior (how many measurements it is worth): shrinks the overall offset ``mu``.
    decay
        Per-measurement forgetting of one configuration's sums and counts (1 = none).
    effect_k
        Pseudo-count per effect (default ``EFFECT_K``); ``inf`` leaves an effect out (used to measure each one).

    Examples
    --------
    >>> import numpy as np
    >>> from oltunes.types import Variant
    >>> v = Variant(family="cnn", name="cnn-s", size="s", accuracy=0.7)
    >>> w = Variant(family="cnn", name="cnn-m", size="m", accuracy=0.75)
    >>> pc = PooledCorrection(n_targets=1, root_k=1.0)
    >>> for acc, variant, r in (("t4", v, 3.0), ("a100", v, 1.0), ("t4", w, 2.0)):
    ...     _ = pc.learn(acc, variant, 1, 1, np.array([r]), np.array([True]))
    >>> [round(float(pc.predict(acc, w, 1, 1)[0]), 2) for acc in ("t4", "a100")]  # w measured on t4 only
    [2.01, 0.71]
    """

    def __init__(self, n_targets: int = 3, root_k: float = 1.0, decay: float = 0.98,
                 effect_k: Mapping[str, float] | None = None) -> None:
        self.n_targets = n_targets
        self.root_k = float(root_k)
        self.decay = float(decay)
        self.effect_k = {**EFFECT_K, **(effect_k or {})}
        self._cells: dict[tuple[str, str, int, int], int] = {}  # (acc, variant, b, c) -> column
        self._families: dict[str, str] = {}  # variant -> family (for the state)
        self._sums = np.zeros((n_targets, 0))  # decayed sums of residuals per cell
        self._counts = np.zeros((n_targets, 0))
        self._tilt_counts = np.zeros((n_targets, 0))  # the part of the counts the batch elasticity learns from
        self._tilt_news = 0  # full-batch measurements since the elasticity was last refitted
        self._gid: dict[str, dict[str, int]] = {e: {} for e in EFFECTS}  # effect -> group key -> index
        # effect -> group per cell, and effect -> parent group per group (``PARENTS``), grown by doubling
        self._idx: dict[str, np.ndarray] = {e: np.zeros(0, dtype=np.intp) for e in EFFECTS}
        self._parent: dict[str, np.ndarray] = {e: np.zeros(0, dtype=np.intp) for e in PARENTS}
        self._effects: dict[str, np.ndarray] = {e: np.zeros((n_targets, 0)) for e in EFFECTS}
        self._mu = np.zeros(n_targets)
        self._fitted = -1
        self._shapes: dict[str, list[tuple[int, int, int]]] = {}  # "kind/variant" -> measured (b, c, shape group)
        self._cfgs: dict[str, list[tuple[int, int, int]]] = {}  # "acc/variant" -> measured (b, c, cfg group)
        # each accelerator's own growth with batch (``tuner.elasticity``)
        self.elastic = BatchElasticity(n_targets, self.effect_k["elasticity"])
        self.scale = GrowthScale(n_targets, self.effect_k["growth_scale"])  # each family's growth with batch
        self.intensity = IntensitySlope(n_targets, self.effect_k["intensity"])  # each accelerator's compute payoff
        self._grids = CorrectionGrid(self)  # the grid's index arrays, cached per axes (derived, not state)
        self.version = 0

    # ------------------------------------------------------------------------------------------------ learn
    def learn(self, acc: str, v: Variant, batch: int, conc: int, y: np.ndarray,
              mask: np.ndarray, growth: np.ndarray | None = None,
              full_batches: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """One measurement's residuals ``y`` (n_targets,), learned where ``mask``; ``growth``: the prior's log change
        from batch 1 to ``batch`` per target (what the batch elasticity scales; none: 0). Only measurements of
        ``full_batches`` (the batch size is what ran: not a stream's partial batches) teach the elasticity.

        Returns the configuration's correction before and after (refitted: ``ROUNDS_PER_OBSERVATION`` rounds).
        """
        before, after = self.learn_many([(acc, v, batch, conc, y, mask, growth, full_batches)])
        return before[0], after[0]

    def learn_many(self, measurements: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray]:
        """Several measurements ``(acc, variant, batch, conc, y, mask, growth, full_batches)`` (``learn``'s arguments)
        at once: every one's statistics added, then one fit (``ROUNDS_PER_OBSERVATION`` rounds per measurement, at
        most ``MAX_ROUNDS``, stopping once converged). Returns each one's configuration correction before it and
        after them all (measurements, n_targets) each.

        "Before it" is the fit before the batch moved along the batch's change by the share of the batch learnt before
        it: one by one, the correction has already taken the earlier measurements when a later one comes (the
        progressive-validation errors behind the margins are taken against it). Against the pre-batch fit, a control
        interval's errors were ~20 % larger (a10-l4-wide seed 0, ~28 measurements a batch: mean |log latency error|
        0.47 vs 0.38 one by one), the margins wider and violations more frequent; the interpolation gives 0.39 at no
        refit."""
        if not measurements:
            return np.zeros((0, self.n_targets)), np.zeros((0, self.n_targets))
        cells = np.array([self._cell(acc, v, b, c, growth) for acc, v, b, c, _, _, growth, _ in measurements],
                         dtype=np.intp)
        self._fit()
        self._add_all(cells, measurements)
        before = self._corrections_of(cells)
        self._fit()
        after = self._corrections_of(cells)
        share_before = (np.arange(len(cells)) / len(cells))[:, None]  # of the batch learnt before each
        return before + (after - before) * share_before, after

    def has(self, acc: str, v: Variant, batch: int, conc: int) -> bool:
        """Whether this configuration was measured before (``learn``'s ``growth`` is read only for a new one)."""
        return (acc, v.name, batch, conc) in self._cells

    def _add_all(self, cells: np.ndarray, measurements: Sequence[tuple]) -> None:
        """The measurements (``learn_many``'s), in order, into their configurations' decayed sums and counts, and the
        full-batch ones' into the elasticity's counts (no refit)."""
        d = self.decay
        for j, (*_, y, mask, _, full_batches) in zip(cells.tolist(), measurements):
            m = np.asarray(mask, dtype=bool)
            self._sums[m, j] = d * self._sums[m, j] + np.asarray(y, dtype=float)[m]
            self._counts[m, j] = d * self._counts[m, j] + 1.0
            self._tilt_counts[m, j] = d * self._tilt_counts[m, j] + float(full_batches)
            self._tilt_news += bool(full_batches and m.any())
        self.version += len(cells)

    def _corrections_of(self, cells: np.ndarray) -> np.ndarray:
        """The corrections (len(cells), T) of known configurations as the effects and slopes stand (no refit)."""
        idx = {e: self._idx[e].take(cells) for e in EFFECTS}
        out = self._mu[:, None] + sum(self._effects[e].take(idx[e], axis=1) for e in EFFECTS)
        el = self.elastic
        n_acc = el.coef.shape[1]
        tilt = el.coef.take(np.minimum(idx["acc"], max(n_acc - 1, 0)), axis=1) if n_acc else 0.0
        out = out + np.where(idx["acc"] < n_acc, tilt * el.x.take(idx["shape"], axis=1), 0.0)
        out = out + self.scale.coef.take(idx["fam"], axis=1) * el.growth[GROWTH_TARGET].take(idx["shape"])
        return (out + intensity_per_cell(self, idx["acc"], cells)).T

    def _cell(self, acc: str, v: Variant, batch: int, conc: int, growth: np.ndarray | None = None) -> int:
        key = (acc, v.name, batch, conc)
        j = self._cells.get(key)
        if j is not None:
            self.intensity.see(v)
            return j
        j = self._cells[key] = len(self._cells)
        self._families[v.name] = v.family
        self.intensity.add_cell(j, v)
        if j >= self._sums.shape[1]:  # grow by doubling: appending one column at a time is quadratic
            grow = np.zeros((self.n_targets, max(16, j)))
            self._sums, self._counts = np.hstack([self._sums, grow]), np.hstack([self._counts, grow])
            self._tilt_counts = np.hstack([self._tilt_counts, grow])
        groups = {}
        for e, key_e in zip(EFFECTS, groups_of(acc, v, batch, conc)):
            ids = self._gid[e]
            g = ids.get(key_e)
            if g is None:
                g = ids[key_e] = len(ids)
                self._effects[e] = np.hstack([self._effects[e], np.zeros((self.n_targets, 1))])
                if e == "fam":
                    self.scale.grow(g + 1)
                elif e == "shape":
                    self._shapes.setdefault(key_e.rsplit("/", 2)[0], []).append((batch, conc, g))
                    self.elastic.add_group(g, centre_key(acc, v, conc), growth)
                elif e == "cfg":
                    self._cfgs.setdefault(f"{acc}/{v.name}", []).append((batch, conc, g))
            groups[e] = g
            self._idx[e] = _set_grown(self._idx[e], j, g)
        for child, (of, par) in PARENTS.items():  # set on every new cell: the last configuration's parent wins
            self._parent[child] = _set_grown(self._parent[child], groups[of], groups[par] if par else 0)
        return j

    # ------------------------------------------------------------------------------------------------ fit
    def _fit(self) -> None:
        """Posterior means of every effect and the slopes, warm-started from the last fit: ``ROUNDS_PER_OBSERVATION``
        rounds per measurement since (at most ``MAX_ROUNDS``; ``oltunes.tuner.model.correction_fit``)."""
        if self._fitted == self.version:
            return
        if self._cells:
            fit(self, min(MAX_ROUNDS, ROUNDS_PER_OBSERVATION * (self.version - self._fitted)))
        self._fitted = self.version

    # ------------------------------------------------------------------------------------------------ predict
    def _effect(self, e: str, key: str) -> np.ndarray | float:
        g = self._gid[e].get(key)
        return 0.0 if g is None else self._effects[e][:, g]

    def predict(self, acc: str, v: Variant, batch: int, conc: int, growth: np.ndarray | None = None) -> np.ndarray:
        """Correction (n_targets,) of one configuration (``growth`` as in ``learn``: used where its batch size was
        never measured on its kind)."""
        self._fit()
        return self._current(acc, v, batch, conc, growth)

    def _current(self, acc: str, v: Variant, batch: int, conc: int, growth: np.ndarray | None = None) -> np.ndarray:
        """The correction as the effects stand (no refit)."""
        out = self._mu.copy()
        keys = groups_of(acc, v, batch, conc)
        for e, key in zip(EFFECTS, keys):
            out = out + self._effect(e, key)
        shape, scale = self._gid["shape"].get(keys[4]), self.scale.of(self._gid["fam"].get(keys[2]))
        if shape is None:  # an unmeasured shape's tilt scales the growth as the correction predicts it
            x = self.scale.x(growth)
            stand_in = None if growth is None else growth + scale * x
        else:
            x, stand_in = float(self.elastic.growth[GROWTH_TARGET, shape]), None
        out = out + self.elastic.term(self._gid["acc"].get(acc), shape, centre_key(acc, v, conc), stand_in)
        out = out + scale * x
        return out + self.intensity.term(self._gid["acc"].get(acc), v) if self.intensity.active else out

    def predict_candidate(self, c: Candidate, growth: np.ndarray | None = None) -> np.ndarray:
        return self.predict(c.accelerator, c.variant, c.batch_size, c.concurrency, growth)

    def grid(self, accelerators: Sequence[str], variants: Sequence[Variant], batch_sizes: Sequence[int],
             concurrencies: Sequence[int],
             growth_of: Callable[[str, Variant, int], np.ndarray] | None = None) -> np.ndarray:
        """Correction over (n_targets, accelerators, variants, batch sizes, concurrencies); ``growth_of(acc, variant,
        batch)``: the prior's growth (``learn``), asked only where a batch size was never measured on the kind.
        Vectorised ``predict`` (``oltunes.tuner.model.correction_grid``)."""
        self._fit()
        return self._grids.grid(accelerators, variants, batch_sizes, concurrencies, growth_of)

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Sufficient statistics per configuration and the fitted effects (``tuner.correction_state``)."""
        return state_of(self)

    @classmethod
    def from_state_dict(cls, d: dict[str, Any], n_targets: int = 3) -> PooledCorrection:
        """A correction restored from ``state_dict`` (``tuner.correction_state``): it predicts as the saved one."""
        pc = cls(n_targets=n_targets, root_k=float(d["root_k"]), decay=float(d["decay"]),
                 effect_k={str(k): float(v) for k, v in d.get("effect_k", {}).items() if k in EFFECT_K})
        return restore_into(pc, d)
