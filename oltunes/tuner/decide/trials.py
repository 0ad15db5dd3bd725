"""Trials: which other candidates are worth trying beside the chosen one (``JobSpec.trials`` > 0).

A trial is run as a shadow (a streaming job's mirrored requests, answers discarded) or a probe shard (a small
first shard of a batch job); its measurement, tagged with its ``purpose``, teaches the tuner a pair it would
otherwise learn only by giving it a real job.

Ranking (first version): for each (device option, variant) pair other than the chosen one, its best feasible
(batch, concurrency) cell; its value is the improvement on the chosen candidate's objective that its
*optimistic* objective promises (discounted by the margin, more for rarely measured accelerator x variant
pairs, as the exploration draw's); pairs that promise none are not suggested.
"""

from __future__ import annotations

import numpy as np

from oltunes.tuner.decide.constraints import Verdict
from oltunes.tuner.decide.objectives import Objective
from oltunes.tuner.model.estimate import Estimate
from oltunes.types import Trial

__all__ = ["rank_trials"]


def rank_trials(est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray,
                chosen: tuple[int, int, int, int], limit: int) -> tuple[Trial, ...]:
    """Up to ``limit`` trials, best first (none for an infeasible job: nothing is known to be safe to try)."""
    if limit <= 0 or not verdict.n_feasible:
        return ()
    o = np.where(verdict.feasible, obj, np.inf)
    P, V = o.shape[:2]
    flat = o.reshape(P, V, -1)
    cell = flat.argmin(axis=2)  # best (batch, concurrency) cell of each (option, variant) pair
    best = np.take_along_axis(flat, cell[:, :, None], axis=2)[:, :, 0]
    bonus = est.marg[:, objective.margin_target][:, None] / np.sqrt(1.0 + est.visits)  # P, V
    optimistic = best * np.exp(-bonus)
    value = float(obj[chosen]) - optimistic
    value[chosen[0], chosen[1]] = -np.inf
    value[~np.isfinite(best)] = -np.inf
    order = np.argsort(-value, axis=None, kind="stable")
    out: list[Trial] = []
    B, C = o.shape[2:]
    for k in order[:limit]:
        p, v = divmod(int(k), V)
        if not value[p, v] > 0:
            break
        b, c = divmod(int(cell[p, v]), C)
        idx = (p, v, b, c)
        out.append(Trial(candidate=est.candidate(idx), device=est.options[p].device, predicted=est.prediction(idx),
                         value=float(value[p, v])))
    return tuple(out)
