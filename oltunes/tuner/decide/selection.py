"""Selection: choose the best feasible candidate, explore, stay put, or fall back to the least violating.

* **choose** — lowest *risk-adjusted* objective (``posterior.risk_adjusted``: the objective x ``exp(risk x sd)``
  of its log, sd from the margin and the (accelerator, variant) pair's visits, x ``1 + miss_cost x P(SLO
  miss)``): an estimate the tuner has never checked is charged for its uncertainty (the lowest of many uncertain
  estimates is most often one that is too low: the winner's curse). Candidates within ``near_equal`` of the
  best, or within the estimate's typical error of the objective (``TYPICAL_ERROR_OF_MARGIN`` x its margin) when
  that is wider, but never more than ``NEAR_EQUAL_CAP`` (:func:`near_equal_band`), are ranked by fragmentation
  (free slots left on the device), then by robustness (:func:`tolerated_slowdown`: the largest factor by which
  the estimate may be too fast before the candidate breaks its SLO or its throughput need), then the smaller
  variant (lower accuracy, still above the floor), then the objective's secondary. Near-equal means the estimate
  cannot tell them apart on the objective (at a cold start every variant whose size is unknown gets the same
  prior, and batch sizes the rate does not fill the same energy): the choice then takes the one that survives
  the largest error of the estimate, not the largest batch, concurrency or model.
* **stay** — a running job (``current``) keeps its placement while feasible and within ``stay_tolerance`` of
  the best, both risk-adjusted (a move costs a model load and a cold start); an infeasible one unless moving
  cuts its graded violation by more than ``INFEASIBLE_STAY``.
* **explore** — bounded: with probability ``explore_rate x 20 / (20 + n_observed)``, among feasible candidates
  (pessimistic latency still meets the SLO) within ``explore_slack`` of the best objective, the one with the best
  *optimistic* objective (discounted by the margin, more for rarely measured accelerator x variant pairs).
* **fall back** — nothing feasible: the least-violating candidate (:func:`least_violating`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from oltunes.tuner.decide.constraints import Verdict
from oltunes.tuner.decide.posterior import MISS_AT_SLO, objective_sd, risk_adjusted
from oltunes.tuner.model.estimate import Estimate
from oltunes.tuner.decide.objectives import Objective
from oltunes.types import Placement

__all__ = ["INFEASIBLE_STAY", "NEAR_EQUAL_CAP", "Choice", "Selector", "near_equal_band", "unravel"]

EXPLORE_N0 = 20.0  # exploration probability halves after this many observations
INFEASIBLE_STAY = 0.1  # an infeasible running job moves only if that cuts its graded violation by more
# Margins are 95th percentiles of |log error|; for a normal error the median |error| is 0.674 / 1.96 = 0.34 of
# that: objectives closer than the estimate's typical error are near-equal (it cannot rank them).
TYPICAL_ERROR_OF_MARGIN = 0.674 / 1.96
# The widest near-equal band, whatever the margin: a cold start's margins (~1.2 in log) made a band of ~50-100 %,
# which chose a CPU at batch 1 over an L4 at batch 16 with half the energy per item and 10x the throughput
# (issue 32). Within 5 % the tie-breaks (packing, robustness) decide; a larger predicted gap is the objective's.
NEAR_EQUAL_CAP = 0.05
# Serving ranks by objective x exp(RISK x sd) x (1 + MISS_COST x P(SLO miss)) (``posterior.risk_adjusted``).
RISK = 1.0
MISS_COST = 4.0
Index = tuple[int, int, int, int]


@dataclass(frozen=True)
class Choice:
    idx: Index
    explored: bool = False
    stayed: bool = False


@dataclass
class Selector:
    near_equal: float = 0.02
    stay_tolerance: float = 0.1
    explore_rate: float = 0.2
    explore_slack: float = 0.5
    crowding: float = 0.25
    throughput_headroom: float = 1.2
    risk: float = RISK
    miss_cost: float = MISS_COST

    def select(self, est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray,
               current: Placement | None, n_observed: int, rng: np.random.Generator) -> Choice:
        settled = self.settle(est, verdict, objective, obj, current)
        return self.maybe_explore(settled, bool(verdict.n_feasible), n_observed, rng,
                                  lambda: self.explore_in(est, verdict, objective, obj))

    def settle(self, est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray,
               current: Placement | None) -> Choice:
        """The choice before the exploration draw (a pure function of its arguments): choose or stay, or the
        least violating candidate when nothing is feasible."""
        stay = stay_index(est, current)
        feasible = verdict.feasible
        if verdict.n_feasible:
            idx = self.choose(est, feasible, objective, obj)
            if stay is not None and stay != idx and feasible[stay]:
                held, best = self.adjusted(est, objective, obj, np.ravel_multi_index(tuple(zip(stay, idx)), obj.shape))
                if held <= best * (1 + self.stay_tolerance):
                    idx = stay
            return Choice(idx, stayed=stay is not None and idx == stay)
        idx, graded = self.least_violating(est, verdict, obj)
        # Moving costs a model load and a cold start: an infeasible job stays unless moving is clearly less bad.
        if stay is not None and stay != idx and graded[stay] <= graded[idx] + INFEASIBLE_STAY:
            idx = stay
        return Choice(idx, stayed=stay is not None and idx == stay)

    def maybe_explore(self, settled: Choice, feasible: bool, n_observed: int, rng: np.random.Generator,
                      explore: Callable[[], Index]) -> Choice:
        """The exploration draw (only for a feasible job that does not stay): ``explore()``'s candidate with
        probability ``explore_rate x 20 / (20 + n_observed)``, else ``settled`` itself."""
        if not feasible or settled.stayed:
            return settled
        p_explore = self.explore_rate * EXPLORE_N0 / (EXPLORE_N0 + n_observed)
        if p_explore > 0 and rng.random() < p_explore:
            eidx = explore()
            if eidx != settled.idx:
                return Choice(eidx, explored=True)
        return settled

    def choose(self, est: Estimate, feasible: np.ndarray, objective: Objective, obj: np.ndarray) -> Index:
        """Best risk-adjusted objective (:meth:`adjusted`); within the near-equal band of it: least
        fragmentation, then most robust, then the smaller variant, then the secondary objective."""
        o = np.where(feasible, obj, np.inf).ravel()
        lowest = int(o.argmin())
        # Adjusting only raises an objective: a cell whose plain objective is above what the lowest cell's adjusted
        # one can be (its sd; a feasible cell misses its SLO with at most ndtr(-1.96)), x the widest band, can
        # neither win nor be near-equal, and is never adjusted.
        _, V, B, C = feasible.shape
        sd = objective_sd(est, objective.margin_target).item(lowest // (B * C))
        reach = o[lowest] * math.exp(self.risk * sd) * (1.0 + self.miss_cost * MISS_AT_SLO) * (
            1.0 + max(self.near_equal, NEAR_EQUAL_CAP))
        cells = np.flatnonzero(o <= reach)
        adj = self.adjusted(est, objective, obj, cells)
        at = int(adj.argmin())  # (the first minimum: its value is the minimum, one pass instead of two)
        best = adj[at]
        p_best = int(cells[at]) // (V * B * C)
        band = near_equal_band(self.near_equal, est, objective, p_best)
        near = adj <= best * (1.0 + band)
        flat = cells[near]
        o = np.full(obj.size, np.inf)  # (the tie-break keys read the objective: the adjusted one)
        o[flat] = adj[near]
        keys = self.tie_break_keys(est, objective, o, flat)
        first = int(np.lexsort(keys)[0])  # the last key is the primary
        return unravel(int(flat[first]), feasible.shape)  # type: ignore[return-value]

    def adjusted(self, est: Estimate, objective: Objective, obj: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """The risk-adjusted objective at raveled ``cells`` (``posterior.risk_adjusted``): charged ``risk`` sd of
        its log uncertainty and ``miss_cost`` x its probability of missing the SLO."""
        return risk_adjusted(est, objective.margin_target, obj, cells, self.risk, self.miss_cost)

    def tie_break_keys(self, est: Estimate, objective: Objective, o: np.ndarray, flat: np.ndarray) -> tuple:
        """The keys ``choose`` orders near-equal cells by (``flat``: raveled grid indices; ``o``: the raveled
        objective), ``np.lexsort``'s order (the last is the primary): objective, secondary, accuracy (the smaller
        variant first), fragility (minus the tolerated slowdown), fragmentation (free slots left)."""
        _, V, B, C = est.shape
        p_idx = flat // (V * B * C)
        frag = fragmentation(est.options)[p_idx]
        secondary = objective.secondary(est, flat, p_idx)
        fragile = -tolerated_slowdown(est, self.throughput_headroom, flat)
        accuracy = np.array([v.accuracy for v in est.variants])[flat // (B * C) % V]
        return o[flat], secondary, accuracy, fragile, frag

    def explore_in(self, est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray) -> Index:
        return self.explore(est, verdict.feasible, objective, obj)

    def explore(self, est: Estimate, feasible: np.ndarray, objective: Objective, obj: np.ndarray) -> Index:
        o = np.where(feasible, obj, np.inf)
        within = feasible & (o <= o.min() * (1.0 + self.explore_slack))
        # Optimism: discount the objective by its margin, scaled down as a (accelerator, variant) pair is measured.
        bonus = est.marg[:, objective.margin_target][:, None] / np.sqrt(1.0 + est.visits)  # P, V
        optimistic = np.where(within, o * np.exp(-bonus[:, :, None, None]), np.inf)
        return tuple(int(i) for i in np.unravel_index(int(np.argmin(optimistic)), feasible.shape))  # type: ignore

    def least_violating(self, est: Estimate, verdict: Verdict, obj: np.ndarray) -> tuple[Index, np.ndarray]:
        """Nothing is feasible: keep the hard constraints first (fits the device, then the accuracy floor — or
        the smallest shortfall when no variant reaches it), then the smallest relative latency + throughput
        violation, + 1 if a co-runner is predicted to miss its SLO (pessimistically: a hard rule here sent
        infeasible jobs to slow empty devices and cost more than it saved), + ``crowding`` per job already on
        the device (spread rather than pack), then the objective."""
        job = est.job
        shape = obj.shape
        over = np.maximum(0.0, est.req_lat / job.slo_ms - 1.0)
        if job.kind == "streaming":  # the worse of latency and throughput (trading one for the other is no gain)
            over = np.maximum(over, job.arrival_rate_rps * self.throughput_headroom / est.pess_thr - 1.0)
        crowd = np.array([len(o.members) for o in est.options], dtype=float)[:, None, None, None]
        co_fail = ~verdict.masks["co-runners"]
        graded = np.broadcast_to(over + self.crowding * crowd + co_fail, shape)
        misfit = np.broadcast_to(~verdict.masks["memory"], shape)
        shortfall = np.broadcast_to(np.array([max(0.0, job.accuracy_floor - v.accuracy)
                                              for v in est.variants])[None, :, None, None], shape)
        first = int(np.lexsort((obj.ravel(), graded.ravel(), shortfall.ravel(), misfit.ravel()))[0])
        graded = np.where(misfit | (shortfall > 0), np.inf, graded)
        return unravel(first, shape), graded  # type: ignore[return-value]


def near_equal_band(near_equal: float, est: Estimate, objective: Objective, p_best: int) -> float:
    """The relative gap on the objective within which candidates count as near-equal: ``near_equal``, or the
    estimate's typical error of the objective on the best option (``TYPICAL_ERROR_OF_MARGIN`` x its margin)
    when that is wider, at most ``NEAR_EQUAL_CAP`` (never below ``near_equal``)."""
    typical = math.expm1(TYPICAL_ERROR_OF_MARGIN * est.marg[p_best, objective.margin_target])
    return max(near_equal, min(typical, NEAR_EQUAL_CAP))


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``np.unravel_index`` of one flat index, as ints."""
    out = []
    for n in reversed(shape):
        flat, i = divmod(flat, n)
        out.append(i)
    return tuple(reversed(out))


def tolerated_slowdown(est: Estimate, throughput_headroom: float, flat: np.ndarray | None = None) -> np.ndarray:
    """How many times slower than estimated each candidate may turn out and still keep its SLO (pessimistic
    request latency x k <= SLO) and, streaming, its throughput need (pessimistic capacity / k >= rate x
    headroom). The estimate's commonest error is a common scale (a prior 15-50x too fast for a whole device at a
    cold start): a small batch at one executor keeps latency slack but has no capacity to spare in a burst, a
    large batch at high concurrency the reverse; the maximin of the two is the candidate a scale error hurts
    least. ``flat``: only those cells (raveled grid indices), the same element-wise arithmetic."""

    def cells(a: np.ndarray) -> np.ndarray:  # (a full grid is read in place: no broadcast view to copy)
        if flat is None:
            return a
        return (a if a.shape == est.shape else np.broadcast_to(a, est.shape)).ravel()[flat]

    k = est.job.slo_ms / cells(est.req_lat)
    rate = est.job.arrival_rate_rps
    if est.job.kind == "streaming" and rate > 0:
        k = np.minimum(k, cells(est.pess_thr) / (rate * throughput_headroom))
    return k


def fragmentation(options) -> np.ndarray:
    """Free slots left on each option's device (then in its pool, as a fraction): the near-equal tie-break."""
    return np.array([o.free_slots_after + o.pool_free_slots_after / 1e4 for o in options])


def stay_index(est: Estimate, current: Placement | None) -> Index | None:
    """Grid index of the running job's current configuration (None: not re-tuning, or no longer in the grid)."""
    if current is None:
        return None
    c = current.candidate
    try:
        return (next(i for i, o in enumerate(est.options) if o.pool.name == current.pool and o.device == current.device),
                next(i for i, v in enumerate(est.variants) if v.name == c.variant.name),
                est.batch_sizes.index(c.batch_size), est.concurrencies.index(c.concurrency))
    except (StopIteration, ValueError):  # its setting is not in this tuner's grid any more
        return None
