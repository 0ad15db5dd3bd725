"""The pooled correction's two nested trees of effects: their groups, their index structure, and the per-level counts
of a fit, laid out as the compiled passes up and down a tree read them (``oltunes.tuner.fit_kernels``; the
model: ``oltunes.tuner.correction``'s module docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from oltunes.profiles import accelerator_kind

if TYPE_CHECKING:
    from oltunes.types import Variant

__all__ = ["ACCELERATOR_TREE", "EFFECTS", "PARENTS", "VARIANT_TREE", "TreeCounts", "TreeFit", "groups_of",
           "kind_arrays", "levels_of", "tree_arrays"]

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
# None for a tree's root, whose parent is 0). "fam_kind" sends the family effects up to the kind (their centring,
# ``fit_kernels.fit_rounds``).
PARENTS: dict[str, tuple[str, str | None]] = {
    **{tree[0]: (tree[0], None) for tree in (ACCELERATOR_TREE, VARIANT_TREE)},
    **{c: (c, p) for tree in (ACCELERATOR_TREE, VARIANT_TREE) for c, p in zip(tree[1:], tree)},
    "fam_kind": ("fam", "kind"),
}


class TreeFit:
    """The trees' structure and counts of ``PooledCorrection`` (a mixin: they read its groups and effects)."""

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
        """Views of the index arrays (the group of each configuration per effect, the parent of each group), renewed
        when a configuration is added (the arrays themselves grow in place in ``_cell``)."""
        n_cells = len(self._cells)
        if self._struct is not None and self._struct["n_cells"] == n_cells:
            return self._struct
        n_groups = {e: len(self._gid[e]) for e in EFFECTS}
        self._struct = {"n_cells": n_cells, "idx": {e: self._idx[e][:n_cells] for e in EFFECTS},
                        "parent": {c: self._parent[c][:n_groups[of]] for c, (of, _) in PARENTS.items()}}
        return self._struct


class TreeCounts(dict):
    """A tree's counts per level (effect -> (n, k, share, n + k): measurements under each group, and the share of its
    data it passes up, each group's data integrated over its own effect weighing n k / (n + k)) and ``tables``: the
    (share, n + k, n) tables of every level side by side, as ``fit_kernels.tree_counts`` makes them. A level's entry is
    made from the tables when first asked for (``levels``: effect -> its columns and k, ``levels_of``; a fit reads
    three of eight)."""

    tables: tuple[np.ndarray, ...]

    def __init__(self, levels: dict[str, tuple[slice, float]] | None = None, tables: tuple[np.ndarray, ...] = ()
                 ) -> None:
        super().__init__()
        self._levels = levels or {}
        self.tables = tables

    def __missing__(self, e: str) -> tuple:
        if e not in self._levels:
            raise KeyError(e)
        cols, k = self._levels[e]
        share, npk, n = self.tables
        out = self[e] = (n[:, cols], k, share[:, cols], npk[:, cols])
        return out

    def __contains__(self, e: object) -> bool:
        return e in self._levels or dict.__contains__(self, e)

    def get(self, e: str, default: Any = None) -> Any:
        return self[e] if e in self else default  # noqa: SIM401 (``self.get`` is this)


def levels_of(tree: tuple[str, ...], st: dict[str, Any], arrays: tuple[np.ndarray, ...]) -> dict[str, tuple]:
    """Each level of ``tree`` (``tree_arrays``' ``arrays``): its columns in the counts' tables and its k, kept with the
    structure ``st``."""
    held = st.setdefault("levels", {})
    levels = held.get(tree)
    if levels is None:
        g_off, ks = arrays[3:5]
        levels = held[tree] = {e: (slice(int(g_off[i]), int(g_off[i + 1])), float(ks[i])) for i, e in enumerate(tree)}
    return levels


def tree_arrays(tree: tuple[str, ...], st: dict[str, Any], effect_k: dict[str, float]) -> tuple[np.ndarray, ...]:
    """A tree as ``fit_kernels`` reads it (its module docstring: leaf, par, ng, g_off, ks, eff_off),
    kept with the structure ``st`` (renewed with it when a configuration is added)."""
    held = st.setdefault("trees", {})
    arrays = held.get(tree)
    if arrays is None:
        parent = st["parent"]
        n_groups = [len(parent[e]) for e in EFFECTS]
        eff_at = dict(zip(EFFECTS, np.cumsum([0, *n_groups[:-1]]).tolist()))
        ng = np.array([len(parent[e]) for e in tree], dtype=np.intp)
        par = [np.zeros(ng[0], dtype=np.intp)] + [parent[e].astype(np.intp) for e in tree[1:]]  # the root's: 0
        ks = np.array([min(effect_k[e], 1e12) for e in tree], dtype=float)  # inf: left out (pinned to its parent)
        arrays = held[tree] = (st["idx"][tree[-1]].astype(np.intp), np.concatenate(par), ng,
                               np.cumsum([0, *ng]).astype(np.intp), ks,
                               np.array([eff_at[e] for e in tree], dtype=np.intp))
    return arrays


def kind_arrays(st: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The kind of each family group and of each configuration (the families' centring in ``fit_rounds``), kept with
    the structure ``st``."""
    held = st.get("kinds")
    if held is None:
        held = st["kinds"] = (st["parent"]["fam_kind"].astype(np.intp), st["idx"]["kind"].astype(np.intp))
    return held
