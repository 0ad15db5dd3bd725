"""The pooled correction's fit (``oltunes.tuner.model.correction``): posterior means of every effect by backfitting, in numpy.

The effects form two nested trees over the configurations (``correction_trees``): the accelerator side (``mu`` >
kind > accelerator > accelerator x family > accelerator x variant > configuration) and the variant side (family >
variant > shape, per kind). Given one tree's fit, the other's posterior means are exact in one pass up (each group's
data, integrated over its own effect, is a message to its parent: it passes up the share ``k / (n + k)`` of its sums)
and one pass down; the two trees alternate (two-block Gauss-Seidel), warm-started from the last fit.

After the rounds, the slopes (a third block) are refitted given both trees: the families'
growth scales (``tuner.growth_scale``), then, after new full-batch measurements, the batch elasticity
(``tuner.elasticity``) on the growth as the correction now predicts it, then the intensity slopes
(``tuner.intensity``). Each is a ridge regression of what the trees leave, on group sums with the groups' own effects
integrated out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from oltunes.tuner.model.correction_trees import ACCELERATOR_TREE, EFFECTS, PARENTS, VARIANT_TREE
from oltunes.tuner.model.growth_scale import GROWTH_TARGET

if TYPE_CHECKING:
    from oltunes.tuner.model.correction import PooledCorrection

__all__ = ["MAX_ROUNDS", "ROUNDS_PER_OBSERVATION", "Layout", "fit", "intensity_per_cell", "slopes_within_kind"]

# Rounds (one pass over each tree) per fit: ROUNDS_PER_OBSERVATION per measurement since the last fit, at most
# MAX_ROUNDS (each fit starts from the last, so the effects converge over successive observations at a bounded
# cost per observation); a fit stops early once nothing moves by more than TOL.
ROUNDS_PER_OBSERVATION, MAX_ROUNDS, TOL = 2, 200, 1e-4


class Layout:
    """Index arrays of the configurations known to a correction: each configuration's group per effect (``idx``),
    each group's parent (``parent``), and flat (target, group) indices to sum by."""

    def __init__(self, pc: PooledCorrection) -> None:
        n = self.n_cells = len(pc._cells)
        self.T = T = pc.n_targets
        n_groups = {e: len(pc._gid[e]) for e in EFFECTS}
        self.idx = {e: pc._idx[e][:n] for e in EFFECTS}
        self.parent = {c: pc._parent[c][:n_groups[of]] for c, (of, _) in PARENTS.items()}
        rows = np.arange(T)[:, None]

        def flat(group_of: np.ndarray, n: int) -> tuple[np.ndarray, int]:
            return (group_of[None, :] + n * rows).ravel(), T * n

        self.cell_is_cfg = n_groups["cfg"] == n  # a configuration's cfg group is itself (as they are made)
        self.leaf = {e: flat(self.idx[e], n_groups[e]) for e in ("cfg", "shape", "fam")}
        self.up = {c: flat(self.parent[c], n_groups[par]) for c, (_, par) in PARENTS.items() if par}

    def sum_by(self, flat: tuple[np.ndarray, int], x: np.ndarray) -> np.ndarray:
        """``x`` (T, items) summed per group (T, groups), ``flat`` from ``leaf`` or ``up``."""
        return np.bincount(flat[0], x.ravel(), flat[1]).reshape(self.T, -1)

    def leaf_sum(self, tree: tuple[str, ...], x: np.ndarray) -> np.ndarray:
        """``x`` per configuration summed per group of the tree's finest level."""
        if self.cell_is_cfg and tree[-1] == "cfg":
            return x
        return self.sum_by(self.leaf[tree[-1]], x)

    def per_cell(self, tree: tuple[str, ...], x: np.ndarray) -> np.ndarray:
        """``x`` per group of the tree's finest level, per configuration."""
        if self.cell_is_cfg and tree[-1] == "cfg":
            return x
        return x.take(self.idx[tree[-1]], axis=1)


def _tree_counts(pc: PooledCorrection, tree: tuple[str, ...], lay: Layout, N: np.ndarray) -> dict[str, tuple]:
    """Per level of ``tree``: (n, k, share, n + k), with n the measurements under each group and share = k / (n + k)
    the part of its data a group passes up (its data integrated over its own effect weighs n k / (n + k))."""
    out = {}
    n = lay.leaf_sum(tree, N)
    for level in range(len(tree) - 1, -1, -1):
        e = tree[level]
        k = min(pc.effect_k[e], 1e12)  # inf: the effect left out (pinned to its parent)
        out[e] = (n, k, k / (n + k), n + k)
        if level:
            n = lay.sum_by(lay.up[e], n * out[e][2])
    return out


def _fit_tree(pc: PooledCorrection, tree: tuple[str, ...], lay: Layout, counts: dict[str, tuple], s_cell: np.ndarray,
              mu_den: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """One tree's posterior means given the other's (``s_cell``: the sums less the other side's), into
    ``pc._effects`` (and ``pc._mu`` for the accelerator tree: ``mu_den`` its denominator). Returns the tree's side
    per configuration and how far ``mu`` moved."""
    sums = {}
    s = lay.leaf_sum(tree, s_cell)
    for level in range(len(tree) - 1, -1, -1):  # up: each group's sums, and its message to its parent
        e = tree[level]
        sums[e] = s
        if level:
            s = lay.sum_by(lay.up[e], s * counts[e][2])
    change = 0.0
    if mu_den is not None:
        mu = (s * counts[tree[0]][2]).sum(axis=1) / mu_den
        change = float(np.abs(mu - pc._mu).max())
        pc._mu = mu
        cum, levels = mu[:, None], tree
    else:
        cum = pc._effects[tree[0]] = sums[tree[0]] / counts[tree[0]][3]
        levels = tree[1:]
    for e in levels:  # down: each group's posterior mean given its parent's
        _, k, _, n_plus_k = counts[e]
        up = cum.take(lay.parent[e], axis=1)
        cum = (sums[e] + k * up) / n_plus_k
        pc._effects[e] = cum - up
    return lay.per_cell(tree, cum), change


def _centre_families(pc: PooledCorrection, lay: Layout, n_fam: np.ndarray, n_kind: np.ndarray) -> np.ndarray:
    """Move each kind's mean family effect (weighted by measurements) into the kind, the fit unchanged. Both trees
    can carry a common offset per kind (all families up, the kind down); only the weak priors tell them apart, so
    alternating between the trees would take many rounds to share it out. Returns the shift per kind."""
    s = lay.sum_by(lay.up["fam_kind"], n_fam * pc._effects["fam"])
    shift = np.divide(s, n_kind, out=np.zeros_like(s), where=n_kind > 0)
    pc._effects["fam"] -= shift.take(lay.parent["fam_kind"], axis=1)
    pc._effects["kind"] += shift
    return shift


def fit(pc: PooledCorrection, rounds: int) -> None:
    """Up to ``rounds`` rounds of backfitting (stopping once converged), then the slopes block (module docstring).
    The slopes are refitted once per fit, given the trees: a fit follows every batch of measurements, so they lag
    the trees by one batch (refitted after every ``ROUNDS_PER_OBSERVATION`` rounds, the slopes took ~40 % of the
    tuner's observe time at 1,000 devices, ``benchmarks.sim_speed``)."""
    lay = Layout(pc)
    n = lay.n_cells
    S, N = pc._sums[:, :n], pc._counts[:, :n]
    idx = lay.idx
    acc_counts = _tree_counts(pc, ACCELERATOR_TREE, lay, N)
    var_counts = _tree_counts(pc, VARIANT_TREE, lay, N)
    var_side = sum(pc._effects[e].take(idx[e], axis=1) for e in VARIANT_TREE)
    x_growth = pc.elastic.growth[GROWTH_TARGET].take(idx["shape"])  # the prior's growth per configuration
    slopes = _slopes_per_cell(pc, lay, x_growth)
    n_top, _, share_top, _ = acc_counts[ACCELERATOR_TREE[0]]
    mu_den = (n_top * share_top).sum(axis=1) + pc.root_k
    n_fam = var_counts["fam"][0]
    n_kind = lay.sum_by(lay.up["fam_kind"], n_fam)
    for _ in range(rounds):
        acc_side, mu_change = _fit_tree(pc, ACCELERATOR_TREE, lay, acc_counts, S - N * (slopes + var_side), mu_den)
        new_var_side, _ = _fit_tree(pc, VARIANT_TREE, lay, var_counts, S - N * (slopes + acc_side))
        new_var_side = new_var_side - _centre_families(pc, lay, n_fam, n_kind).take(idx["kind"], axis=1)
        change = max(mu_change, float(np.abs(new_var_side - var_side).max()))
        var_side = new_var_side
        if change < TOL:
            break
    _refit_slopes(pc, lay, (acc_counts, var_counts), acc_side + var_side, x_growth, bool(pc._tilt_news))


def _tilt_per_cell(pc: PooledCorrection, lay: Layout) -> np.ndarray:
    """The batch elasticity's tilt per configuration (T, cells), as of its last fit."""
    el = pc.elastic
    return el.coefficients(len(pc._gid["acc"])).take(lay.idx["acc"], axis=1) * el.x.take(lay.idx["shape"], axis=1)


def _scale_per_cell(pc: PooledCorrection, lay: Layout, x_growth: np.ndarray) -> np.ndarray:
    """The families' growth scales' term per configuration (T, cells)."""
    return pc.scale.coef.take(lay.idx["fam"], axis=1) * x_growth


def intensity_per_cell(pc: PooledCorrection, acc_of_cell: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """The intensity slopes' term (T, len(cells)) of configurations ``cells`` on accelerator groups ``acc_of_cell``,
    as of their last fit (0 before the first, and for an accelerator newer than it)."""
    it = pc.intensity
    if not it.active or it.coef.shape[1] == 0:
        return np.zeros((pc.n_targets, len(cells)))
    a = np.minimum(acc_of_cell, it.coef.shape[1] - 1)
    known = it.known.take(cells) * (acc_of_cell < it.coef.shape[1])
    return it.coef.take(a, axis=1) * ((it.x.take(cells) - it.mean.take(a, axis=1)) * known)


def _slopes_per_cell(pc: PooledCorrection, lay: Layout, x_growth: np.ndarray) -> np.ndarray:
    """All three slopes' terms per configuration (T, cells), as of their last fit."""
    out = _tilt_per_cell(pc, lay) + _scale_per_cell(pc, lay, x_growth)
    return out + intensity_per_cell(pc, lay.idx["acc"], np.arange(lay.n_cells))


def _refit_slopes(pc: PooledCorrection, lay: Layout, counts: tuple[dict, dict], sides: np.ndarray,
                  x_growth: np.ndarray, refit_tilt: bool) -> None:
    """The slopes block given both trees' fit ``sides`` (T, configurations): the growth scales, the elasticity (with
    ``refit_tilt``), the intensity slopes (module docstring)."""
    acc_counts, var_counts = counts
    n = lay.n_cells
    S, N = pc._sums[:, :n], pc._counts[:, :n]
    idx, el = lay.idx, pc.elastic
    cells = np.arange(n)
    intensity = intensity_per_cell(pc, idx["acc"], cells)
    # the growth scales, on the shape groups' sums with their own effects integrated out
    fam_of_shape = lay.parent["var"].take(lay.parent["shape"])
    x_shape = el.growth[GROWTH_TARGET, :el.n_groups]
    n_shape, _, share, _ = var_counts["shape"]
    unshaped = sides - pc._effects["shape"].take(idx["shape"], axis=1) + _tilt_per_cell(pc, lay) + intensity
    residual = lay.sum_by(lay.leaf["shape"], S - N * unshaped) * share
    pc.scale.fit(x_shape, n_shape * share, residual, fam_of_shape)
    scaled = _scale_per_cell(pc, lay, x_growth)
    if refit_tilt:  # the elasticity, on the growth as the correction now predicts it
        pc._tilt_news = 0
        shape = pc._effects["shape"] + pc.scale.coef.take(fam_of_shape, axis=1) * x_shape
        x_cell = el.centre_growth(shape).take(idx["shape"], axis=1)
        full = np.divide(pc._tilt_counts[:, :n], N, out=np.zeros_like(N), where=N > 0)  # full-batch share
        el.fit(x_cell, N * full, (S - N * (sides + scaled + intensity)) * full, idx["acc"], lay.parent["acc"])
    if pc.intensity.active:  # on the accelerator x variant groups' data, their own effects integrated out
        own = pc._effects["acc_var"].take(idx["acc_var"], axis=1) + pc._effects["cfg"].take(idx["cfg"], axis=1)
        r = S - N * (sides + scaled + _tilt_per_cell(pc, lay) - own)
        by_acc_var = lay.sum_by(lay.up["cfg"], lay.leaf_sum(ACCELERATOR_TREE, r) * acc_counts["cfg"][2])
        n_av, _, share, _ = acc_counts["acc_var"]
        pc.intensity.fit(n_av * share, by_acc_var * share, idx["acc_var"], lay.parent["acc_var"],
                         lay.parent["acc_fam"], lay.parent["acc"])


def slopes_within_kind(x: np.ndarray, n: np.ndarray, residual_sums: np.ndarray, acc_of: np.ndarray,
                       kind_of_acc: np.ndarray, k: float) -> np.ndarray:
    """Ridge slopes (T, accelerators) of ``residual_sums`` on ``x`` per accelerator (``n``: each column's weight,
    ``acc_of`` its accelerator), less their weighted mean over each kind's accelerators (a slope common to a kind
    belongs elsewhere). Shared by the batch elasticity and the intensity slopes."""
    T, A = n.shape[0], len(kind_of_acc)
    K = int(kind_of_acc.max()) + 1 if A else 0
    rows = np.arange(T)[:, None]
    by_acc = (acc_of[None, :] + A * rows).ravel()
    w = np.bincount(by_acc, (n * x * x).ravel(), T * A).reshape(T, A)
    c = np.bincount(by_acc, (x * residual_sums).ravel(), T * A).reshape(T, A) / (w + k)
    by_kind = (kind_of_acc[None, :] + K * rows).ravel()
    kind_w = np.bincount(by_kind, w.ravel(), T * K).reshape(T, K)
    kind_wc = np.bincount(by_kind, (w * c).ravel(), T * K).reshape(T, K)
    kind_mean = np.divide(kind_wc, kind_w, out=np.zeros_like(kind_w), where=kind_w > 0)
    return c - kind_mean.take(kind_of_acc, axis=1)

