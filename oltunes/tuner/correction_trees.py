"""The pooled correction's two nested trees of effects and their exact posterior means given the other tree: the part
of ``PooledCorrection``'s fit (``oltunes.tuner.correction``, its module docstring) that walks a tree up and down."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from oltunes.profiles import accelerator_kind

if TYPE_CHECKING:
    from oltunes.types import Variant

__all__ = ["ACCELERATOR_TREE", "EFFECTS", "PARENTS", "VARIANT_TREE", "TreeCounts", "TreeFit", "groups_of"]

# The effects in the order backfitting visits them (coarse first), and each one's group key.
EFFECTS: tuple[str, ...] = ("kind", "acc", "fam", "var", "shape", "acc_fam", "acc_var", "cfg")
# The two nested trees of effects (coarse to fine): the accelerator side, under ``mu``, and the variant side.
ACCELERATOR_TREE: tuple[str, ...] = ("kind", "acc", "acc_fam", "acc_var", "cfg")
VARIANT_TREE: tuple[str, ...] = ("fam", "var", "shape")


def groups_of(acc: str, v: Variant, batch: int, conc: int) -> tuple[str, ...]:
    """The group key of each effect (``EFFECTS`` order) for one configuration."""
    k = accelerator_kind(acc)
    return (k, acc, f"{k}/{v.family}", f"{k}/{v.name}", f"{k}/{v.name}/{batch}/{conc}", f"{acc}/{v.family}",
            f"{acc}/{v.name}", f"{acc}/{v.name}/{batch}/{conc}")


# Parent of each effect's groups in its tree: name -> (the effect whose groups it indexes, the parent effect, or
# None for a tree's root, whose parent is 0). "fam_kind" sends the family effects up to the kind (``_centre_families``).
PARENTS: dict[str, tuple[str, str | None]] = {
    **{tree[0]: (tree[0], None) for tree in (ACCELERATOR_TREE, VARIANT_TREE)},
    **{c: (c, p) for tree in (ACCELERATOR_TREE, VARIANT_TREE) for c, p in zip(tree[1:], tree)},
    "fam_kind": ("fam", "kind"),
}


class TreeFit:
    """The tree passes of ``PooledCorrection`` (a mixin: they read its groups, counts and effects)."""

    n_targets: int
    effect_k: dict[str, float]
    _cells: dict
    _gid: dict[str, dict[str, int]]
    _idx: dict[str, np.ndarray]
    _parent: dict[str, np.ndarray]
    _effects: dict[str, np.ndarray]
    _mu: np.ndarray
    _struct: dict[str, Any] | None

    def _structure(self) -> dict[str, Any]:
        """Views of the index arrays (per configuration, per parent) and their flattened bincount indices, renewed
        when a configuration is added (the arrays themselves grow in place in ``_cell``)."""
        n_cells = len(self._cells)
        if self._struct is not None and self._struct["n_cells"] == n_cells:
            return self._struct
        T = self.n_targets
        n_groups = {e: len(self._gid[e]) for e in EFFECTS}
        idx = {e: self._idx[e][:n_cells] for e in EFFECTS}
        parent = {c: self._parent[c][:n_groups[of]] for c, (of, _) in PARENTS.items()}
        rows = np.arange(T)[:, None]

        def flat(group_of: np.ndarray, n: int) -> tuple[np.ndarray, int]:  # (target, group) -> one bincount
            return (group_of[None, :] + n * rows).ravel(), T * n

        self._struct = {
            "n_cells": n_cells, "idx": idx, "parent": parent,
            # each configuration created its own "cfg" group, in order: group index = configuration index
            "cell_is_cfg": n_groups["cfg"] == n_cells,
            "leaf": {e: flat(idx[e], n_groups[e]) for e in ("cfg", "shape", "fam")},
            "up": {c: flat(parent[c], n_groups[par]) for c, (_, par) in PARENTS.items() if par},
        }
        return self._struct

    @staticmethod
    def _sum_by(flat: tuple[np.ndarray, int], x: np.ndarray, T: int) -> np.ndarray:
        return np.bincount(flat[0], x.ravel(), flat[1]).reshape(T, -1)

    def _leaf_sum(self, tree: tuple[str, ...], st: dict[str, Any], x: np.ndarray) -> np.ndarray:
        """Per-configuration values summed into the tree's leaf groups. A configuration is its own "cfg" group
        (same index): the sum is then ``0.0 + x``, as bincount would add it, without the bincount."""
        if st["cell_is_cfg"] and tree[-1] == "cfg":
            return x + 0.0
        return self._sum_by(st["leaf"][tree[-1]], x, self.n_targets)

    def _tree_counts(self, tree: tuple[str, ...], st: dict[str, Any], N: np.ndarray) -> TreeCounts:
        """Per level of a tree: measurements under each group, and the share of its data it passes up; with the
        tree's passes laid out for this fit (``TreeCounts.passes``)."""
        T = self.n_targets
        out = TreeCounts()
        n = self._leaf_sum(tree, st, N)
        for level in range(len(tree) - 1, -1, -1):
            e = tree[level]
            k = min(self.effect_k[e], 1e12)  # inf: left out (pinned to its parent)
            n_plus_k = n + k
            share = k / n_plus_k  # the group's data integrated over its own effect: weight n k / (n + k)
            out[e] = (n, k, share, n_plus_k)
            if level:
                n = self._sum_by(st["up"][e], n * share, T)
        out.passes = _passes(tree, st, out, T)
        return out

    def _fit_tree(self, tree: tuple[str, ...], st: dict[str, Any], counts: TreeCounts,
                  s_cell: np.ndarray, mu_den: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """Exact posterior means of one nested tree given partial residual sums per configuration; returns the
        tree's sum per configuration and how far ``mu`` moved (the accelerator tree, whose root ``mu`` is shrunk
        towards the prior: ``mu_den``, its data's weight + ``root_k``).

        Run on the (target, group) tables raveled (``_passes``: the same element-wise operations and bincounts, in
        the same order, as on the 2-D tables, without a reshape per sum or a lookup per level)."""
        T = self.n_targets
        leaf, up, root_share, root_npk, down, out = counts.passes
        s = s_cell.ravel()
        s = s + 0.0 if leaf is None else np.bincount(leaf[0], s, leaf[1])  # (see ``_leaf_sum``)
        sums = []
        for share, flat, n in up:  # up: each group's data as a message to its parent
            sums.append(s)
            s = np.bincount(flat, s * share, n)
        change = 0.0
        effects = self._effects
        if mu_den is not None:  # the root: mu, shrunk towards the prior by its evidence
            mu = (s * root_share).reshape(T, -1).sum(axis=1) / mu_den
            change = float(np.abs(mu - self._mu).max())
            self._mu = cum = mu
            sums.append(s)
        else:  # a root under 0: its data shrunk towards 0 (sums by bincount are never -0.0: + 0 x k, - 0 are no-ops)
            cum = s / root_npk
            effects[tree[0]] = cum.reshape(T, -1)
            down = down[1:]
        for e, parent, k, n_plus_k in down:  # down: a group's cumulative value = its data shrunk towards its parent's
            up_value = cum.take(parent)
            cum = (sums.pop() + k * up_value) / n_plus_k
            effects[e] = (cum - up_value).reshape(T, -1)
        if out is not None:
            cum = cum.take(out)
        return cum.reshape(T, -1), change

    def _family_weights(self, st: dict[str, Any], counts: dict[str, tuple]) -> tuple[np.ndarray, ...]:
        """``_centre_families``' weights, fixed over a fit: measurements per family, their sum per kind, where > 0."""
        n_fam = counts["fam"][0]
        n = self._sum_by(st["up"]["fam_kind"], n_fam, self.n_targets)
        return n_fam, n, n > 0

    def _centre_families(self, st: dict[str, Any], weights: tuple[np.ndarray, ...]) -> np.ndarray:
        """Move each kind's mean family effect (weighted by measurements) into the kind's effect, the fit unchanged.

        Both trees can carry a common offset per kind (all families up, the kind down); only the weak priors tell
        them apart, so alternating between the trees would take many rounds to share it out. Centring the
        families settles it at once. Returns the offset moved per kind (T, kinds).
        """
        n_fam, n, has = weights
        s = self._sum_by(st["up"]["fam_kind"], n_fam * self._effects["fam"], self.n_targets)
        shift = np.divide(s, n, out=np.zeros(s.shape), where=has)  # (``zeros_like``'s float zeros, without its wrapper)
        self._effects["fam"] -= shift.take(st["parent"]["fam_kind"], axis=1)
        self._effects["kind"] += shift
        return shift


class TreeCounts(dict):
    """``_tree_counts``' levels (effect -> (n, k, share, n + k)) and ``passes``: ``_fit_tree``'s fixed inputs for
    this fit, on raveled tables (``_passes``)."""

    passes: tuple


def _passes(tree: tuple[str, ...], st: dict[str, Any], counts: dict[str, tuple], T: int) -> tuple:
    """What every pass of one fit over ``tree`` reuses, raveled (target-major): the leaf sum's bincount (None: the
    configurations are the leaf groups), per level up (the share it passes, its parent's bincount), the root's share
    and n + k, per level down from the root (effect, its parent's value per group as a flat ``take``, k, n + k), and
    the take back to configurations (None: the leaf groups are the configurations)."""
    flat = st.get("flat_take")
    if flat is None:  # per structure: (target, group) -> (target, parent group) and -> (target, configuration)
        rows = np.arange(T)[:, None]
        parent, idx = st["parent"], st["idx"]
        flat = st["flat_take"] = {
            "parent": {c: (parent[c][None, :] + (len(parent[p]) if p else 1) * rows).ravel()
                       for c, (_, p) in PARENTS.items()},
            "cell": {e: (idx[e][None, :] + len(parent[e]) * rows).ravel() for e in (ACCELERATOR_TREE[-1],
                                                                                   VARIANT_TREE[-1])}}
    identity = st["cell_is_cfg"] and tree[-1] == "cfg"
    up = [(counts[tree[level]][2].ravel(), *st["up"][tree[level]]) for level in range(len(tree) - 1, 0, -1)]
    _, _, root_share, root_npk = counts[tree[0]]
    down = [(e, flat["parent"][e], counts[e][1], counts[e][3].ravel()) for e in tree]
    return (None if identity else st["leaf"][tree[-1]], up, root_share.ravel(), root_npk.ravel(), down,
            None if identity else flat["cell"][tree[-1]])
