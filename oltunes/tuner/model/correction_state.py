"""Save and restore a ``PooledCorrection`` (``oltunes.tuner.model.correction``) as plain JSON types."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from oltunes.jsonstate import pack_floats, unpack_floats
from oltunes.tuner.model.correction_trees import EFFECTS
from oltunes.types import Variant

if TYPE_CHECKING:
    from oltunes.tuner.model.correction import PooledCorrection

__all__ = ["restore_into", "state_of"]


def state_of(pc: PooledCorrection) -> dict[str, Any]:
    """Sufficient statistics per configuration, and the fitted effects (the next fit starts from them, so a
    restored correction predicts exactly as the saved one). The tables are packed (`pack_floats`): thousands
    of configurations at scale, which as nested lists of decimals were the slowest part of a save."""
    n = len(pc._cells)
    return {"root_k": pc.root_k, "decay": pc.decay, "effect_k": pc.effect_k,
            "cells": [[acc, pc._families[name], name, b, c] for (acc, name, b, c) in pc._cells],
            "sums": pack_floats(pc._sums[:, :n]), "counts": pack_floats(pc._counts[:, :n]),
            "tilt_counts": pack_floats(pc._tilt_counts[:, :n]),
            "mu": pc._mu.tolist(), "effects": {e: pack_floats(pc._effects[e]) for e in EFFECTS},
            "elasticity": pc.elastic.state_dict(), "tilt_news": pc._tilt_news,
            "growth_scale": pc.scale.state_dict(),
            "intensity": pc.intensity.state_dict(),
            "unfitted": pc.version - max(pc._fitted, 0)}  # measurements since the last fit


def restore_into(pc: PooledCorrection, d: dict[str, Any]) -> PooledCorrection:
    """``pc``, a new correction built with ``d``'s settings, given ``d``'s statistics and effects. A state from
    before the crossed effects (``groups``) restores no correction: it relearns."""
    n_targets = pc.n_targets
    cells = d.get("cells", ())
    if cells:
        sums, counts = unpack_floats(d["sums"]), unpack_floats(d["counts"])
        if sums.shape != (n_targets, len(cells)) or counts.shape != sums.shape:
            raise ValueError(f"correction: {len(cells)} cells but tables of shape {sums.shape}, {counts.shape}")
        for (acc, family, name, b, c), s, n in zip(cells, sums.T, counts.T):
            v = Variant(family=family, name=name, size=name, accuracy=0.0)
            j = pc._cell(acc, v, int(b), int(c))
            pc._sums[:, j], pc._counts[:, j] = s, n
        if "tilt_counts" in d:  # absent in states saved before the batch elasticity: it relearns
            pc._tilt_counts[:, : len(cells)] = unpack_floats(d["tilt_counts"])
    if "effects" in d:
        pc._mu = np.array(d["mu"], dtype=float)
        for e in EFFECTS:
            eff = unpack_floats(d["effects"][e]).reshape(n_targets, -1)
            if eff.shape == pc._effects[e].shape:
                pc._effects[e] = eff
    if "elasticity" in d:  # absent in states saved before it existed: the tilt relearns
        pc.elastic.load(d["elasticity"])
        pc._tilt_news = int(d.get("tilt_news", 0))
    if "growth_scale" in d:  # absent in states saved before it existed: it relearns
        pc.scale.load(d["growth_scale"], len(pc._gid["fam"]))
    if "intensity" in d:  # absent in states saved before it existed: it relearns (from the variants measured next)
        pc.intensity.load(d["intensity"])
    pc._fitted = 0
    pc.version = int(d.get("unfitted", len(pc._cells)))
    return pc
