"""Explanation of a decision: what it ranked on, the runner-ups with the reason each lost, and a one-line note.

Every number an explanation ranks on is shown: ``Explanation.ranked_on`` names the objective's quantity and unit
(a streaming job's energy per item at the batch its arrival rate fills, a batch job's energy per item, time to
process its items, or cost per item), ``objective`` is the chosen candidate's value and each runner-up's
``objective`` its own. A runner-up's reason is the first thing that made it lose, with its numbers:

* worse on the objective by more than the near-equal band: ``"2.0x the energy per item of the chosen (...)"``;
* within the band (``Explanation.near_equal_band``, at most ``selection.NEAR_EQUAL_CAP``): ``"within 3.1 % of the
  chosen's energy per item; ..."`` and the tie-break that decided (packing, robustness, the smaller variant, the
  secondary objective);
* better on the objective than the chosen: only when the decision kept a running job's placement or explored,
  and the reason says which;
* infeasible: the constraint it breaks (``Verdict.why``).

Batch jobs' reasons also give the job's time at each candidate's throughput, so a slow choice argues in numbers.
The runner-ups: the best feasible cell of each of the ``k - 1`` best (option, variant) pairs (the chosen pair's
best other cell only when it beats the chosen on the objective), then the best infeasible candidate.
"""

from __future__ import annotations

import math

import numpy as np

from oltunes.tuner.decide.constraints import Verdict
from oltunes.tuner.model.estimate import Estimate
from oltunes.tuner.decide.objectives import Objective
from oltunes.tuner.decide.selection import Choice, Index, Selector, near_equal_band, unravel
from oltunes.types import MAX_QUANTITY, Alternative, Explanation, Prediction

__all__ = ["explanation", "note", "ranked_on", "runner_ups"]

# objective name -> (its noun in a reason, its unit)
_QUANTITY = {"energy": ("energy per item", "J/item"), "completion_time": ("time for the job", "s"),
             "cost": ("cost per item", "$/item")}
# what each objective's secondary (the last tie-break) is (``Objective.secondary``)
_SECONDARY = {"energy": "cost per item"}
RATIO_FROM = 1.5  # a gap at least this factor reads "2.0x the ...", a smaller one "17 % more ..."


def ranked_on(objective: Objective, est: Estimate) -> str:
    noun, unit = _QUANTITY.get(objective.name, (objective.name, ""))
    if objective.name == "energy" and est.job.kind == "streaming" and est.job.arrival_rate_rps > 0:
        noun = "energy per item at the batch the arrival rate fills"
    elif objective.name == "completion_time":
        noun = f"time to process the job's {est.job.items:,} items"
    return f"{noun} ({unit})" if unit else noun


def explanation(est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray, choice: Choice,
                selector: Selector, predicted: Prediction, text: str, k: int = 4) -> Explanation:
    """The whole explanation of ``choice`` on a scored grid (``obj``: the objective, lower is better)."""
    idx = choice.idx
    rankable = obj == obj  # (not NaN)
    feasible_obj = np.where(verdict.feasible & rankable, obj, np.inf)
    at = int(feasible_obj.argmin())
    band = near_equal_band(selector.near_equal, est, objective, at // math.prod(obj.shape[1:]))
    best = unravel(at, obj.shape)
    best_value = feasible_obj.item(best)
    better = verdict.n_feasible and best_value < obj.item(idx)
    ups = runner_ups(est, verdict, objective, obj, choice, selector, band, best_value, feasible_obj, rankable, k)
    return Explanation(
        predicted=predicted, n_candidates=verdict.n_candidates, n_feasible=verdict.n_feasible, note=text,
        runner_ups=tuple(ups), ranked_on=ranked_on(objective, est), objective=_value(obj.item(idx)),
        near_equal_band=band, would_have_chosen=est.key(best) if better else "")


def runner_ups(est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray, choice: Choice,
               selector: Selector, band: float, best: float, feasible_obj: np.ndarray, rankable: np.ndarray,
               k: int = 4) -> list[Alternative]:
    """The best cell of each of the ``k - 1`` best other (option, variant) pairs, and the best infeasible
    candidate (by objective) with the constraint it breaks, each with the reason it lost (``best``: the best
    feasible objective; ``band``: the near-equal band around it; ``feasible_obj``: the objective where feasible
    and not NaN, else inf, which is changed here; ``rankable``: where the objective is not NaN)."""
    idx = choice.idx
    P, V, B, C = obj.shape
    o = feasible_obj.reshape(P * V, B * C)
    chosen_pair, chosen_cell = idx[0] * V + idx[1], idx[2] * C + idx[3]
    o[chosen_pair, chosen_cell] = np.inf
    cell = o.argmin(axis=1)
    per_pair = o[np.arange(P * V), cell]
    if not per_pair[chosen_pair] < obj.item(idx):  # the chosen pair's other cells only when they beat it
        per_pair[chosen_pair] = np.inf
    out = []
    for pair in np.argsort(per_pair, kind="stable")[: k - 1].tolist():
        if not math.isfinite(per_pair[pair]):
            break
        j = unravel(pair * B * C + int(cell[pair]), obj.shape)
        out.append(_alternative(est, j, obj, _feasible_reason(est, objective, obj, choice, selector, band, best, j)))
    infeasible = np.where(~verdict.feasible & rankable, obj, np.inf)
    j = unravel(int(infeasible.argmin()), obj.shape)
    if math.isfinite(infeasible.item(j)) and j != idx:
        out.append(_alternative(est, j, obj, verdict.why(j)))
    return out


def _alternative(est: Estimate, j: Index, obj: np.ndarray, reason: str) -> Alternative:
    return Alternative(candidate_key=est.key(j), prediction=est.prediction(j), reason=reason,
                       objective=_value(obj.item(j)))


def _value(x: float) -> float | None:
    return x if math.isfinite(x) and 0.0 <= x <= MAX_QUANTITY else None


def _feasible_reason(est: Estimate, objective: Objective, obj: np.ndarray, choice: Choice, selector: Selector,
                     band: float, best: float, j: Index) -> str:
    """Why feasible ``j`` lost to the chosen: its objective gap, or (near-equal: within ``band`` of the ``best``
    objective, as selection counts it) the tie-break that decided, or the choice's source when ``j`` was ahead."""
    noun, unit = _QUANTITY.get(objective.name, (objective.name, ""))
    mine, chosen = obj.item(j), obj.item(choice.idx)
    numbers = f"{_num(mine)} vs {_num(chosen)} {unit}".rstrip()
    if mine > best * (1.0 + band) and mine >= chosen:
        ratio = mine / chosen if chosen > 0 else math.inf
        gap = (f"{ratio:.1f}x the {noun} of the chosen" if ratio >= RATIO_FROM
               else f"{_pct(ratio - 1.0)} % more {noun} than the chosen")
        outside = "" if mine > chosen * (1.0 + band) else f", outside the {_pct(band)} % near-equal band of the best"
        return f"{gap} ({numbers}{outside}){_job_time(est, j, choice.idx)}"
    if mine > best * (1.0 + band) or mine * (1.0 + band) < chosen:  # ahead, and not a near-equal contender
        why = _source(choice, selector) if choice.stayed or choice.explored else _riskier(est, objective, obj,
                                                                                          choice, selector, j, unit)
        return f"{_pct(1.0 - mine / chosen)} % less {noun} than the chosen ({numbers}), but {why}"
    rel = abs(mine / chosen - 1.0) if chosen > 0 else 0.0
    lead = f"within {_pct(rel)} % of the chosen's {noun} (near-equal: {_pct(band)} % band)"
    return f"{lead}; {_tie_break(est, objective, obj, choice, selector, j)}{_job_time(est, j, choice.idx)}"


def _tie_break(est: Estimate, objective: Objective, obj: np.ndarray, choice: Choice, selector: Selector,
               j: Index) -> str:
    """The first tie-break key (``Selector.tie_break_keys``, primary first; lower wins) on which ``j`` and the
    chosen differ, shown as a user reads it."""
    shape = obj.shape
    flat = np.array([np.ravel_multi_index(choice.idx, shape), np.ravel_multi_index(j, shape)])
    objective_key, secondary, accuracy, fragile, frag = (
        np.asarray(key, dtype=float) for key in selector.tie_break_keys(est, objective, obj.ravel(), flat))
    keys = ((frag, frag, "free slots left on the device", "packs tighter"),
            (fragile, -fragile, "slowdown tolerated before a target breaks", "is more robust to estimate error"),
            (accuracy, accuracy, "accuracy", "is the smaller variant above the floor"),
            (secondary, secondary, _SECONDARY.get(objective.name, "energy per item"), "wins the last tie-break"),
            (objective_key, objective_key, "objective", "ranks first"))
    for key, shown, what, wins in keys:
        c, r = key
        if c == r or (math.isnan(c) and math.isnan(r)):
            continue
        if c < r or math.isnan(r):
            return f"the chosen {wins} ({what} {_num(shown[0])} vs {_num(shown[1])} here)"
        return f"ahead on {what} ({_num(shown[1])} vs {_num(shown[0])}), but {_source(choice, selector)}"
    return "tied with the chosen on every tie-break (the first in the grid's order was taken)"


def _riskier(est: Estimate, objective: Objective, obj: np.ndarray, choice: Choice, selector: Selector, j: Index,
             unit: str) -> str:
    """Why a candidate with a lower predicted objective lost the choice itself: its risk-adjusted objective."""
    mine, chosen = selector.adjusted(est, objective, obj, np.ravel_multi_index(tuple(zip(j, choice.idx)), obj.shape))
    numbers = f"({_num(mine)} vs {_num(chosen)} {unit}".rstrip()
    if mine >= chosen:
        return (f"its risk-adjusted {objective.name} is higher {numbers}: the estimate's uncertainty and SLO risk "
                "priced in)")
    return (f"its risk-adjusted {objective.name} is near-equal {numbers}: the estimate's uncertainty and SLO risk "
            f"priced in), and {_tie_break(est, objective, obj, choice, selector, j)}")


def _source(choice: Choice, selector: Selector) -> str:
    if choice.stayed:
        return f"the job kept its current placement (within {_pct(selector.stay_tolerance)} % of the best)"
    if choice.explored:
        return "the decision explored a less-measured candidate"
    return "the decision fell back to the least violating candidate"


def _job_time(est: Estimate, j: Index, idx: Index) -> str:
    """A batch job's time for its items at both throughputs (``""`` for streaming jobs or an item-less job)."""
    job = est.job
    if job.kind != "batch" or job.items <= 0:
        return ""
    mine, chosen = job.items / est.thr.item(j), job.items / est.thr.item(idx)
    return f"; its {job.items:,} items take {_num(mine)} s here vs {_num(chosen)} s on the chosen"


def _pct(x: float) -> str:
    x *= 100.0
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def _num(x: float) -> str:
    """Four significant digits (``0.01164``, ``3268``, ``1.2e+04``)."""
    return f"{x:.4g}"


def note(est: Estimate, verdict: Verdict, idx: Index, source: str) -> str:
    opt = est.options[idx[0]]
    where = f"{opt.pool.name} device {opt.device}" + (
        f" shared with {', '.join(m.job_id for m in opt.members)}" if opt.shared else " (empty)")
    if verdict.n_feasible:
        return f"{verdict.n_feasible}/{verdict.n_candidates} candidates feasible; chosen by {source}; {where}"
    if est.no_capacity:
        return f"infeasible: no free slot in any pool; best available would be {where}"
    return verdict.infeasible_note(idx, where)
