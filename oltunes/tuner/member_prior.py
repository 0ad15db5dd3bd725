"""A co-runner check's member: its prior log request latency at each co-load level, from the terms that do not
depend on the co-load (kept with the member's own part, ``member_rows._MemberOwn``).

``Prior.adjust`` computes three outputs over whole candidate grids with a dozen numpy calls; a member needs the
latency alone, at four loads, for every co-runner set it meets. The same expressions in the same order, split at
the co-load (``tests/tuner/test_member_rows.py`` checks them against ``adjust`` bit for bit).
"""

from __future__ import annotations

import numpy as np

__all__ = ["LOAD_LEVELS", "prior_latency", "prior_latency_heads"]

# The newcomer's busy shares a member is checked at (``corunners``: a candidate uses the smallest level >= its own).
LOAD_LEVELS = np.array([0.25, 0.5, 1.0])


def prior_latency_heads(base_lat: float, batch: float, conc: float, lat1: float, rate: float) -> tuple:
    """The terms of the prior's log request latency (``Prior.adjust``'s first output) that do not depend on the
    co-runners' load, by the very expressions ``adjust`` computes them with."""
    slow = np.log1p(0.5 * (np.asarray(conc) - 1.0))
    if rate > 0:
        log_b_eff = np.log(np.minimum(batch, 1.0 + rate * np.asarray(lat1) / 1000.0 / conc))
        return np.log(lat1) + 0.75 * log_b_eff, slow
    return np.log(base_lat), slow


def prior_latency(heads: tuple, co_load: np.ndarray) -> np.ndarray:
    """``Prior.adjust(base_lat, _, batch, conc, co_load, lat1, _, rate)[LAT]`` from ``prior_latency_heads``."""
    head, slow = heads
    return head + (slow + np.log1p(0.5 * np.asarray(co_load)))
