"""Explanation of a decision: runner-ups (why each lost) and a one-line note (how many were feasible, where).

The reasons come from the objective (a feasible runner-up lost on it) and from the constraints (the best
infeasible candidate, and what an infeasible decision breaks).
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.tuner import built
from oltunes.tuner.constraints import Verdict
from oltunes.tuner.estimate import Estimate
from oltunes.tuner.explain_kernels import pair_minima
from oltunes.tuner.objectives import Objective
from oltunes.tuner.selection import Index, unravel
from oltunes.types import Alternative

__all__ = ["runner_ups", "note"]


def runner_ups(est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray, idx: Index,
               near_equal: float, k: int = 4) -> list[Alternative]:
    """The best setting of each of the ``k - 1`` best other (option, variant) pairs, and the best infeasible
    candidate (by objective) with the constraint it breaks."""
    out: list[Alternative] = []
    best = obj[idx]
    V = obj.shape[1]
    feasible = verdict.feasible
    # each pair's best feasible objective and the best infeasible cell, in one compiled scan of the grid
    per_pair, cell, flat_infeasible = pair_minima(feasible, obj)
    per_pair[idx[0], idx[1]] = np.inf
    C = obj.shape[3]
    for flat in per_pair.ravel().argsort()[: k - 1].tolist():  # np.argsort(axis=None) less its wrapper
        p, v = divmod(flat, V)
        if not math.isfinite(per_pair[p, v]):
            break
        j = (p, v, *divmod(int(cell[p, v]), C))
        rel = (obj[j] / best - 1.0) * 100 if best > 0 else 0.0
        reason = f"{objective.worse} (+{rel:.1f}%)" if rel > near_equal * 100 else "near-equal, leaves more fragmentation"
        out.append(built.alternative(est.key(j), est.prediction(j), reason))
    j = unravel(int(flat_infeasible), obj.shape)
    if not feasible[j] and np.isfinite(obj[j]) and j != idx:
        out.append(built.alternative(est.key(j), est.prediction(j), verdict.why(j)))
    return out


def note(est: Estimate, verdict: Verdict, idx: Index, source: str) -> str:
    opt = est.options[idx[0]]
    where = f"{opt.pool.name} device {opt.device}" + (
        f" shared with {', '.join(m.job_id for m in opt.members)}" if opt.shared else " (empty)")
    if verdict.n_feasible:
        return f"{verdict.n_feasible}/{verdict.n_candidates} candidates feasible; chosen by {source}; {where}"
    if est.no_capacity:
        return f"infeasible: no free slot in any pool; best available would be {where}"
    return verdict.infeasible_note(idx, where)
