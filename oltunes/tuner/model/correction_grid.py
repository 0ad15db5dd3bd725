"""The pooled correction's grid over (accelerators, variants, batch sizes, concurrencies), vectorised.

``PooledCorrection.grid`` scores every candidate of a decision: per (accelerator, variant) the effects above the
shapes, then each measured shape and configuration effect, then the batch elasticity's tilt and the family growth
scale's term, and the intensity slopes' (what ``PooledCorrection.predict`` adds for one configuration; a missing group
adds 0). Each effect is gathered for every (accelerator, variant) at once through index arrays cached per axes
(rebuilt, or extended, only when the groups they read grow): one cell at a time, a Python loop per (accelerator,
variant) and per measured cell was most of a decision right after an observation.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from oltunes.profiles import accelerator_kind
from oltunes.tuner.model.elasticity import centre_key
from oltunes.tuner.model.growth_scale import GROWTH_TARGET
from oltunes.tuner.model.memo import put_bounded
from oltunes.types import Variant

if TYPE_CHECKING:
    from oltunes.tuner.model.correction import PooledCorrection

__all__ = ["CorrectionGrid"]

GRIDS_KEPT = 256  # grid axes whose index arrays are kept


class CorrectionGrid:
    """The grid of one ``PooledCorrection`` (read-only use of its effects and group maps) and its cached index arrays."""

    def __init__(self, pc: PooledCorrection) -> None:
        self._pc = pc
        self._cache: dict[tuple, dict[str, tuple]] = {}  # axes -> part -> (the group counts it read, its arrays)

    def grid(self, accelerators: Sequence[str], variants: Sequence[Variant], batch_sizes: Sequence[int],
             concurrencies: Sequence[int],
             growth_of: Callable[[str, Variant, int], np.ndarray] | None = None) -> np.ndarray:
        """The correction's grid as its effects stand (module docstring)."""
        T, P, V = self._pc.n_targets, len(accelerators), len(variants)
        axes = self._axes(accelerators, variants, batch_sizes, concurrencies)
        base = axes["base"]
        side = self._pc._mu[:, None] + self._gathered("kind", base["kind"]) + self._gathered("acc", base["acc"])
        side = side[:, :, None]
        for e in ("fam", "var", "acc_fam", "acc_var"):
            side = side + self._gathered(e, base[e])
        out = np.empty((T, P, V, len(batch_sizes), len(concurrencies)))
        out[...] = side[:, :, :, None, None]
        flat = out.reshape(T, -1)  # a view: cells by flat index
        for e in ("shape", "cfg"):  # each measured cell appears once per effect, so `+=` adds each once
            cells = axes[e]["cells"]
            if len(cells):
                flat[:, cells] += self._pc._effects[e].take(axes[e]["groups"], axis=1)
        tilt, scale = axes["tilt"], axes["scale"]
        growth = self._asked_growth(axes["parts"], (tilt, scale), accelerators, variants, batch_sizes, growth_of)
        theta = self._gathered_scale(base["fam"])  # T, P, V
        if growth[0] is not None:  # an unmeasured shape's tilt scales the growth as the correction predicts it
            ps, js = ([a[i] for a in tilt["asks"]] for i in (0, 1))
            growth[0] = growth[0] + theta[:, ps, js] * growth[0][[GROWTH_TARGET]]
        self._add_tilt(flat, tilt, growth[0])
        self._add_scale(flat, scale, theta, growth[1])
        if self._pc.intensity.active:  # the intensity slopes' term, per (accelerator, variant), added last
            out += self._pc.intensity.of_variants(base["acc"], variants)[:, :, :, None, None]
        return out

    def _asked_growth(self, parts: dict[str, Any], asking: tuple[dict[str, Any], ...], accelerators: Sequence[str],
                      variants: Sequence[Variant], batch_sizes: Sequence[int],
                      growth_of: Callable[[str, Variant, int], np.ndarray] | None) -> list[np.ndarray | None]:
        """The prior's growth (T, asks) for each part's "asks" (the (accelerator, variant, batch) indices it needs;
        None: no ``growth_of`` or nothing asked), asking ``growth_of`` once per (accelerator, variant, batch). Kept
        with the axes' parts (``parts``) until a part asking is rebuilt or another ``growth_of`` is given: the prior's
        growth of an (accelerator, variant, batch) does not change (as the elasticity keeps it per shape group)."""
        if growth_of is None:
            return [None] * len(asking)
        held = parts.get("growth")
        if held is not None and held[0] == growth_of and all(a is b for a, b in zip(held[1], asking)):
            return list(held[2])
        lists = [part["asks"] for part in asking]
        at = {a: i for i, a in enumerate(dict.fromkeys(a for lst in lists for a in lst))}
        out: list[np.ndarray | None] = [None] * len(asking)
        if at:
            T = self._pc.n_targets
            table = np.array([growth_of(accelerators[p], variants[j], batch_sizes[bi]) for p, j, bi in at],
                             dtype=float).reshape(len(at), T).T
            out = [table.take([at[a] for a in lst], axis=1) if lst else None for lst in lists]
        parts["growth"] = (growth_of, asking, out)
        return list(out)

    def _gathered_scale(self, fam: np.ndarray) -> np.ndarray:
        """The family growth scale of each (accelerator, variant) (T, P, V): 0.0 where the kind has no family group."""
        coef = self._pc.scale.coef
        if not coef.shape[1]:
            return np.zeros((self._pc.n_targets, *fam.shape))
        return np.where(fam >= 0, coef.take(np.maximum(fam, 0), axis=1), 0.0)

    def _add_scale(self, flat: np.ndarray, scale: dict[str, Any], theta: np.ndarray,
                   growth: np.ndarray | None) -> None:
        """Add the family growth scale's term (``PooledCorrection._current``'s last addition) to every cell: the
        scale x the prior's growth, as a measured shape keeps it, else as ``growth`` (asked) gives it, else 0."""
        x = np.zeros(flat.shape[1])
        cells, shape, ask, pv = scale["cells"], scale["shape"], scale["ask"], scale["pv"]
        if len(cells):
            by_shape = shape >= 0
            x[cells[by_shape]] = self._pc.elastic.growth[GROWTH_TARGET].take(shape[by_shape])
            if growth is not None:
                x[cells[~by_shape]] = growth[GROWTH_TARGET].take(ask[~by_shape])
        T = self._pc.n_targets
        term = np.zeros((T, flat.shape[1]))
        if len(cells):
            term[:, cells] = theta.reshape(T, -1).take(pv, axis=1) * x[cells]
        flat += term

    def _add_tilt(self, flat: np.ndarray, tilt: dict[str, Any], growth: np.ndarray | None) -> None:
        """Add the batch elasticity's tilt (``BatchElasticity.term``, vectorised) to the grid's cells (flat indices)
        that ask for one (``_tilt``): 0.0 where ``term`` gives 0.0 (no growth to tilt, or the elasticity not
        yet fitted as far as the accelerator). ``growth``: the growth standing in for each of the tilt's asks."""
        cells = tilt["cells"]
        if not len(cells):
            return
        el, T = self._pc.elastic, self._pc.n_targets
        acc, g, h, ask = tilt["acc"], tilt["shape"], tilt["centre"], tilt["ask"]
        fitted = acc < el.coef.shape[1]
        by_shape = (g >= 0) & (g < el.n_groups)
        x = el.x.take(np.where(by_shape, g, 0), axis=1) if by_shape.any() else np.zeros((T, len(cells)))
        valid = fitted & by_shape
        if growth is not None:
            # the prior's growth where the kind never measured the batch size, once per (accelerator, variant, batch)
            by_growth = (ask >= 0) & (h < el.mean.shape[1])
            if by_growth.any():
                x_growth = (growth.take(np.where(by_growth, ask, 0), axis=1)
                            - el.mean.take(np.where(by_growth, h, 0), axis=1))
                x = np.where(by_growth, x_growth, x)
                valid |= fitted & by_growth
        if valid.any():
            flat[:, cells] += np.where(valid, el.coef.take(np.where(fitted, acc, 0), axis=1) * x, 0.0)

    def _gathered(self, e: str, groups: np.ndarray) -> np.ndarray:
        """Effect ``e`` of each group in ``groups`` (-1: none, 0.0), shaped (T, *groups.shape)."""
        eff = self._pc._effects[e]
        if not eff.shape[1]:
            return np.zeros((self._pc.n_targets, *groups.shape))
        return np.where(groups >= 0, eff.take(np.maximum(groups, 0), axis=1), 0.0)

    def _axes(self, accelerators: Sequence[str], variants: Sequence[Variant], batch_sizes: Sequence[int],
                   concurrencies: Sequence[int]) -> dict[str, Any]:
        """Index arrays of one grid's axes, by part, cached per axes; a part is rebuilt (or extended) when the groups
        it reads grow (groups are only ever added: their counts tell when)."""
        key = (tuple(accelerators), tuple((v.name, v.family) for v in variants), tuple(batch_sizes),
               tuple(concurrencies))
        cache = self._cache
        parts = cache.get(key)
        if parts is None:  # bounded; the grids asked for are few (accelerator sets x families)
            parts = put_bounded(cache, key, {}, GRIDS_KEPT)
        n = {e: len(ids) for e, ids in self._pc._gid.items()}
        n["centre"] = len(self._pc.elastic.centre_ids)
        axes_of = (accelerators, variants, batch_sizes, concurrencies)
        # part: (the counts it reads, its builder given the part as last built, or None)
        built: dict[str, tuple[tuple[str, ...], Callable[[Any], Any]]] = {
            "base": (("kind", "acc", "fam", "var", "acc_fam", "acc_var"), lambda _: self._base(*axes_of)),
            "shape": (("shape",), lambda last: self._measured(self._pc._shapes, True, last, *axes_of)),
            "cfg": (("cfg",), lambda last: self._measured(self._pc._cfgs, False, last, *axes_of)),
            "tilt": (("acc", "shape", "centre"), lambda _: self._tilt(*axes_of)),
            "scale": (("fam", "shape"), lambda _: self._scale(*axes_of)),
        }
        axes = {}
        for part, (reads, build) in built.items():
            token = tuple(n[e] for e in reads)
            held = parts.get(part)
            if held is None or held[0] != token:
                held = parts[part] = (token, build(held and held[1]))
            axes[part] = held[1]
        axes["parts"] = parts  # what else is kept with these axes (``_asked_growth``)
        return axes

    def _base(self, accelerators: Sequence[str], variants: Sequence[Variant], *_: Sequence[int]) -> dict:
        """Group per accelerator (kind, acc) and per (accelerator, variant) (the other effects above the shapes)."""
        ids, P, V = self._pc._gid, len(accelerators), len(variants)
        kinds = [accelerator_kind(acc) for acc in accelerators]
        pairs = [(acc, k, v) for acc, k in zip(accelerators, kinds) for v in variants]

        def groups(e: str, keys: list[str], shape: tuple[int, ...]) -> np.ndarray:
            return np.array([ids[e].get(key, -1) for key in keys], dtype=np.intp).reshape(shape)

        return {"kind": groups("kind", kinds, (P,)), "acc": groups("acc", list(accelerators), (P,)),
                "fam": groups("fam", [f"{k}/{v.family}" for _, k, v in pairs], (P, V)),
                "var": groups("var", [f"{k}/{v.name}" for _, k, v in pairs], (P, V)),
                "acc_fam": groups("acc_fam", [f"{acc}/{v.family}" for acc, _, v in pairs], (P, V)),
                "acc_var": groups("acc_var", [f"{acc}/{v.name}" for acc, _, v in pairs], (P, V))}

    def _measured(self, table: dict[str, list[tuple[int, int, int]]], by_kind: bool, held: dict | None,
                       accelerators: Sequence[str], variants: Sequence[Variant], batch_sizes: Sequence[int],
                       concurrencies: Sequence[int]) -> dict[str, Any]:
        """Flat index ("cells") and group ("groups") of each grid cell measured in ``table`` (``_shapes`` keyed by
        kind, ``_cfgs`` by accelerator), as the grid's batch sizes and concurrencies place them. The table's lists
        only grow, so ``held`` (the last result) is extended by the entries added since ("seen": how many entries of
        each (accelerator, variant) were read): a new configuration costs one look-up per (accelerator, variant)."""
        if held is None:
            owners = [accelerator_kind(acc) if by_kind else acc for acc in accelerators]
            held = {"keys": [f"{owner}/{v.name}" for owner in owners for v in variants], "found": ([], []),
                    "b_at": {b: i for i, b in enumerate(batch_sizes)},
                    "c_at": {c: i for i, c in enumerate(concurrencies)}}
            held["seen"] = [0] * len(held["keys"])
        keys, seen, (cells, groups), b_at, c_at = held["keys"], held["seen"], held["found"], held["b_at"], held["c_at"]
        B, C = len(batch_sizes), len(concurrencies)
        for pj, key in enumerate(keys):  # pj = p * V + j
            entries = table.get(key, ())
            if len(entries) > seen[pj]:
                for b, c, g in entries[seen[pj]:]:
                    if b in b_at and c in c_at:
                        cells.append((pj * B + b_at[b]) * C + c_at[c])
                        groups.append(g)
                seen[pj] = len(entries)
        held["cells"], held["groups"] = np.array(cells, dtype=np.intp), np.array(groups, dtype=np.intp)
        return held

    def _tilt(self, accelerators: Sequence[str], variants: Sequence[Variant], batch_sizes: Sequence[int],
                   concurrencies: Sequence[int]) -> dict[str, Any]:
        """The cells ``BatchElasticity.term`` is asked for (a known accelerator, a centre for the kind, variant and
        concurrency): flat index, accelerator group, shape group (-1: none), centre, and which of "asks" (the
        (accelerator, variant, batch) whose prior growth stands in for a missing shape group) it needs (-1: none)."""
        ids, centre_ids = self._pc._gid, self._pc.elastic.centre_ids
        B, C, V = len(batch_sizes), len(concurrencies), len(variants)
        cols: dict[str, list[int]] = {"cells": [], "acc": [], "shape": [], "centre": [], "ask": []}
        asks: dict[tuple[int, int, int], int] = {}
        for p, acc in enumerate(accelerators):
            a = ids["acc"].get(acc)
            if a is None or not centre_ids:
                continue
            k = accelerator_kind(acc)
            for j, v in enumerate(variants):
                for ci, c in enumerate(concurrencies):
                    h = centre_ids.get(centre_key(acc, v, c))
                    if h is None:
                        continue
                    for bi, b in enumerate(batch_sizes):
                        g = ids["shape"].get(f"{k}/{v.name}/{b}/{c}")
                        cols["cells"].append(((p * V + j) * B + bi) * C + ci)
                        cols["acc"].append(a)
                        cols["centre"].append(h)
                        cols["shape"].append(-1 if g is None else g)
                        cols["ask"].append(-1 if g is not None else asks.setdefault((p, j, bi), len(asks)))
        out: dict[str, Any] = {col: np.array(values, dtype=np.intp) for col, values in cols.items()}
        out["asks"] = list(asks)
        return out

    def _scale(self, accelerators: Sequence[str], variants: Sequence[Variant], batch_sizes: Sequence[int],
               concurrencies: Sequence[int]) -> dict[str, Any]:
        """The cells the family growth scale may reach (their kind has the variant's family group): flat index,
        (accelerator, variant) pair ``p * V + j``, shape group (-1: none), and which of "asks" (the (accelerator,
        variant, batch) whose prior growth stands in for a missing shape group) it needs (-1: none)."""
        ids = self._pc._gid
        B, C, V = len(batch_sizes), len(concurrencies), len(variants)
        cols: dict[str, list[int]] = {"cells": [], "pv": [], "shape": [], "ask": []}
        asks: dict[tuple[int, int, int], int] = {}
        for p, acc in enumerate(accelerators):
            k = accelerator_kind(acc)
            for j, v in enumerate(variants):
                if f"{k}/{v.family}" not in ids["fam"]:
                    continue
                for bi, b in enumerate(batch_sizes):
                    for ci, c in enumerate(concurrencies):
                        g = ids["shape"].get(f"{k}/{v.name}/{b}/{c}")
                        cols["cells"].append(((p * V + j) * B + bi) * C + ci)
                        cols["pv"].append(p * V + j)
                        cols["shape"].append(-1 if g is None else g)
                        cols["ask"].append(-1 if g is not None else asks.setdefault((p, j, bi), len(asks)))
        out: dict[str, Any] = {col: np.array(values, dtype=np.intp) for col, values in cols.items()}
        out["asks"] = list(asks)
        return out
