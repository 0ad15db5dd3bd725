"""Trials: which other candidates are worth trying beside the chosen one (``JobSpec.trials`` > 0).

A trial is run as a shadow (a streaming job's mirrored requests, answers discarded) or a probe shard (a small
first shard of a batch job); its measurement, tagged with its ``purpose``, teaches the tuner a pair it would
otherwise learn only by giving it a real job.

Ranking by value under the estimate's posterior (``posterior``): for each (device option, variant) pair other
than the chosen one, its best feasible (batch, concurrency) cell. Its value is the net expected saving over the
job's run, in the objective's unit:

* **expected improvement** on the chosen candidate's objective if the pair turned out better
  (``posterior.expected_improvement``, lognormal, with the sd a measurement of the pair would remove: a well
  measured pair has little left to reveal), x the probability it keeps the SLO;
* **x how long the job runs** after the trial: a batch job's items, a streaming job's rate x its horizon
  (``deadline_s`` as the duration hint, else ``DEFAULT_HORIZON_S``); an objective that is already the whole
  job's (completion time) counts once;
* **less the trial's cost**: a shadow's mirrored share of the requests at the trial cell's objective (its answers
  are discarded), a probe's share of the items at what it costs beyond the chosen cell (probed items count
  towards the output).

Pairs worth nothing net are not suggested.
"""

from __future__ import annotations

import numpy as np

from oltunes.tuner.decide.constraints import Verdict
from oltunes.tuner.decide.objectives import Objective
from oltunes.tuner.decide.posterior import expected_improvement, learnable_sd, miss_probability
from oltunes.tuner.model.estimate import Estimate
from oltunes.types import PROBE_SHARE, SHADOW_SHARE, JobSpec, Trial

__all__ = ["DEFAULT_HORIZON_S", "SHADOW_MIN_BATCHES", "horizon_items", "rank_trials", "trial_values"]

DEFAULT_HORIZON_S = 3600.0  # a streaming job without a duration hint is valued over an hour
# A shadow's measurement reports the p99 of its batches: of one or two (a shadow's interval at 2 % of a stream) it is
# their max or less, and flatters the candidate. Fewer than this many batches report nothing (the simulator's shadow
# and the real path's shadow worker alike).
SHADOW_MIN_BATCHES = 3


def horizon_items(job: JobSpec) -> float:
    """Items the job will run: a batch job's items, a stream's rate x (``deadline_s`` or ``DEFAULT_HORIZON_S``)."""
    if job.kind == "streaming":
        return job.arrival_rate_rps * (job.deadline_s or DEFAULT_HORIZON_S)
    return float(max(job.items, 1))


def trial_values(est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray,
                 chosen: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(P, V) net values of trying each pair's best feasible cell (-inf: not a trial: the chosen pair, or no
    feasible cell) and those cells' (batch, concurrency) indices, raveled."""
    o = np.where(verdict.feasible, obj, np.inf)
    P, V = o.shape[:2]
    flat = o.reshape(P, V, -1)
    cell = flat.argmin(axis=2)  # best (batch, concurrency) cell of each (option, variant) pair
    best = np.take_along_axis(flat, cell[:, :, None], axis=2)[:, :, 0]
    ok = np.isfinite(best)
    ok[chosen[0], chosen[1]] = False
    value = np.full((P, V), -np.inf)
    if not ok.any():
        return value, cell
    incumbent = float(obj[chosen])
    pv = np.flatnonzero(ok)
    cells = pv * flat.shape[2] + cell.ravel()[pv]
    tried = best.ravel()[pv]
    sd = learnable_sd(est, objective.margin_target).ravel()[pv]
    gain = expected_improvement(incumbent, np.log(tried), sd) * (1.0 - miss_probability(est, cells))
    job = est.job
    share = SHADOW_SHARE if job.kind == "streaming" else PROBE_SHARE
    # an objective per item counts over the items left after the trial; a whole job's (completion time) once
    per_item = objective.name != "completion_time"
    scale = horizon_items(job) if per_item else 1.0
    trial_scale = share * scale
    spent = tried if job.kind == "streaming" else np.maximum(tried - incumbent, 0.0)
    value.ravel()[pv] = gain * scale * (1.0 - share) - spent * trial_scale
    return value, cell


def rank_trials(est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray,
                chosen: tuple[int, int, int, int], limit: int) -> tuple[Trial, ...]:
    """Up to ``limit`` trials, best first (none for an infeasible job: nothing is known to be safe to try)."""
    if limit <= 0 or not verdict.n_feasible:
        return ()
    value, cell = trial_values(est, verdict, objective, obj, chosen)
    V = value.shape[1]
    C = obj.shape[3]
    out: list[Trial] = []
    for k in np.argsort(-value, axis=None, kind="stable")[:limit]:
        p, v = divmod(int(k), V)
        if not value[p, v] > 0:
            break
        b, c = divmod(int(cell[p, v]), C)
        idx = (p, v, b, c)
        out.append(Trial(candidate=est.candidate(idx), device=est.options[p].device, predicted=est.prediction(idx),
                         value=float(value[p, v])))
    return tuple(out)
