"""Constraints: each rules candidates out (a boolean mask over the estimate's grid) and says why.

A candidate is feasible when it passes every constraint:

* ``memory`` — fits the device's free memory and slots (``candidates.memory_need_gb``);
* ``accuracy`` — the variant's accuracy >= the job's floor;
* ``latency`` — pessimistic p99 (request latency for streaming: + batch-fill wait + queueing) <= SLO;
* ``throughput`` — streaming: pessimistic throughput >= arrival rate x headroom;
* ``co-runners`` — on a shared device, every job already there keeps its SLO with the newcomer
  (``corunners.member_checks``).

Masks are small broadcastable arrays (materialised only where needed). The explanation — why a runner-up lost,
which constraints the best infeasible candidate breaks, how many candidates each rules out — comes from here.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import ClassVar

import numpy as np

from oltunes.registry import Registered
from oltunes.tuner.decide.candidates import memory_need_gb
from oltunes.tuner.decide.corunners import DeviceChecks, load_level, member_checks
from oltunes.tuner.model.estimate import Estimate, Estimator

__all__ = ["Constraint", "Verdict", "at", "build_constraints"]


def at(mask: np.ndarray, idx: tuple[int, ...]) -> bool:
    """``mask`` (broadcastable to the candidate grid) at grid index ``idx``."""
    return mask.item(tuple([i if n > 1 else 0 for i, n in zip(idx, mask.shape)]))


def count_broadcast(mask: np.ndarray, shape: tuple[int, ...]) -> int:
    """True cells of ``mask`` broadcast to ``shape`` (each of its cells stands for the cells it is repeated over)."""
    mask = np.asarray(mask)
    return int(np.count_nonzero(mask)) * _repeats(mask, shape)


def count_false_broadcast(mask: np.ndarray, shape: tuple[int, ...]) -> int:
    """``count_broadcast(~mask, shape)`` without negating a copy of the mask (its cells less its True ones)."""
    mask = np.asarray(mask)
    return (mask.size - int(np.count_nonzero(mask))) * _repeats(mask, shape)


def _repeats(mask: np.ndarray, shape: tuple[int, ...]) -> int:
    """How many cells of ``shape`` each cell of ``mask`` stands for, broadcast to it."""
    lead = len(shape) - mask.ndim
    return math.prod(shape[:lead]) * math.prod(n for n, m in zip(shape[lead:], mask.shape) if m == 1)


_size = attrgetter("size")  # (a mask's cells: the attribute, not numpy's ``size`` function around it)


def conjunction(masks, shape: tuple[int, ...]) -> np.ndarray:
    """The masks' AND over the full grid (a new array): the small ones first, so only the last steps run over
    every cell (AND is exact in any order)."""
    small, full, cells = None, [], math.prod(shape)
    for m in sorted(masks, key=_size):
        if m.size < cells:
            small = m if small is None else small & m
        else:
            full.append(m)
    if not full:
        return np.broadcast_to(np.ones((), dtype=bool) if small is None else small, shape).copy()
    out = full[0] & small if small is not None else full[0].copy()
    for m in full[1:]:
        out &= m
    return out


class Constraint(Registered, root=True):
    """Base class: ``mask(est)`` (True = allowed), ``why(est, idx)`` for a candidate the mask rules out."""

    label: ClassVar[str] = ""  # how an infeasible note names the broken constraint
    why_rank: ClassVar[int] = 0  # a runner-up's reason names its lowest-ranked broken constraint

    def __init__(self, estimator: Estimator, throughput_headroom: float = 1.2) -> None:
        self.estimator = estimator
        self.throughput_headroom = throughput_headroom

    def mask(self, est: Estimate) -> np.ndarray:
        raise NotImplementedError

    def why(self, est: Estimate, idx: tuple[int, ...]) -> str:
        raise NotImplementedError

    def detail(self, est: Estimate, idx: tuple[int, ...]) -> str:
        """Extra words for the infeasible note when the chosen candidate breaks this constraint."""
        return ""


class Accuracy(Constraint, name="accuracy"):
    label = "accuracy floor"
    why_rank = 1

    def mask(self, est: Estimate) -> np.ndarray:
        floor = est.job.accuracy_floor
        return np.array([v.accuracy >= floor for v in est.variants])[None, :, None, None]

    def why(self, est: Estimate, idx: tuple[int, ...]) -> str:
        return f"below accuracy floor ({est.variants[idx[1]].accuracy:.3f} < {est.job.accuracy_floor:.3f})"

    def detail(self, est: Estimate, idx: tuple[int, ...]) -> str:
        return f" (best accuracy {max(v.accuracy for v in est.variants):.3f} < {est.job.accuracy_floor:.3f})"


class Latency(Constraint, name="latency"):
    label = "p99 latency SLO"
    why_rank = 2

    def mask(self, est: Estimate) -> np.ndarray:
        return est.req_lat <= est.job.slo_ms

    def why(self, est: Estimate, idx: tuple[int, ...]) -> str:
        lat = est.req_lat[idx]
        return f"misses the SLO by {lat - est.job.slo_ms:.1f} ms ({lat:.1f} ms with margin > {est.job.slo_ms:g} ms)"

    def detail(self, est: Estimate, idx: tuple[int, ...]) -> str:
        return f" (predicted {est.req_lat[idx]:.1f} ms with margin > SLO {est.job.slo_ms:g} ms)"


class Throughput(Constraint, name="throughput"):
    label = "throughput >= arrival rate"
    why_rank = 3

    def mask(self, est: Estimate) -> np.ndarray:
        if est.job.kind != "streaming":
            return np.ones((1, 1, 1, 1), dtype=bool)
        return est.pess_thr >= est.job.arrival_rate_rps * self.throughput_headroom

    def why(self, est: Estimate, idx: tuple[int, ...]) -> str:
        need = est.job.arrival_rate_rps * self.throughput_headroom
        capacity = np.broadcast_to(est.pess_thr, est.shape)[idx]
        return (f"capacity {capacity:.4g} items/s (with margin) below the {need:.4g} req/s it needs "
                f"(arrival rate x {self.throughput_headroom:g} headroom)")


class CoRunners(Constraint, name="co-runners"):
    label = "co-runners' SLOs"
    why_rank = 4

    def __init__(self, estimator: Estimator, throughput_headroom: float = 1.2) -> None:
        super().__init__(estimator, throughput_headroom)
        self.kept = DeviceChecks()

    def mask(self, est: Estimate) -> np.ndarray:
        checks = est.extra["members"] = member_checks(self.estimator, est.options, est.variants, est.job, self.kept)
        co = checks.ok  # P, V, L
        rate = est.job.arrival_rate_rps
        if est.job.kind != "streaming" or rate <= 0:  # batch jobs run flat out: the top level
            return co[:, :, None, None, -1]
        # the newcomer's busy share (the rate over each cell's throughput) decides how much it slows them
        level = load_level(rate / est.thr)  # P, V, B, C
        P, V, _ = co.shape
        return co[np.arange(P)[:, None, None, None], np.arange(V)[None, :, None, None], level]

    def why(self, est: Estimate, idx: tuple[int, ...]) -> str:
        return "a co-runner on that device would miss its SLO"


class Memory(Constraint, name="memory"):
    label = "device memory"
    why_rank = 0

    def mask(self, est: Estimate) -> np.ndarray:
        need = np.array([[memory_need_gb(v, c) for c in est.concurrencies] for v in est.variants])  # V, C
        free_mem = np.array([o.free_memory_gb for o in est.options])
        fits = np.greater_equal.outer(free_mem, need)[:, :, None, :]  # P, V, 1, C: need <= free memory
        return np.zeros_like(fits) if est.no_capacity else fits  # no capacity: nothing fits

    def why(self, est: Estimate, idx: tuple[int, ...]) -> str:
        return "does not fit free memory/slots"


# Every constraint, in the order infeasible notes list broken ones and count what each rules out.
NOTE_ORDER = ("accuracy", "latency", "throughput", "co-runners", "memory")


def build_constraints(estimator: Estimator, throughput_headroom: float) -> dict[str, Constraint]:
    return {n: Constraint.make(n, estimator=estimator, throughput_headroom=throughput_headroom) for n in NOTE_ORDER}
# Which broken constraint's detail an infeasible note gives (the first that has one).
DETAIL_ORDER = ("latency", "accuracy")


class Verdict:
    """Every constraint's mask over one estimate, their conjunction, and the words for what they rule out."""

    def __init__(self, constraints: dict[str, Constraint], est: Estimate) -> None:
        self.constraints = constraints
        self.est = est
        self.masks = {name: c.mask(est) for name, c in constraints.items()}
        self.feasible = conjunction(self.masks.values(), est.shape)
        self.n_feasible = int(np.count_nonzero(self.feasible))
        # Candidates = those that fit a device at all; the others are not counted as options.
        self.n_candidates = count_broadcast(self.masks["memory"], est.shape)

    def why(self, idx: tuple[int, ...]) -> str:
        """Why a candidate is ruled out: its most fundamental broken constraint ("" if none)."""
        for name in sorted(self.constraints, key=lambda n: self.constraints[n].why_rank):
            if not at(self.masks[name], idx):
                return self.constraints[name].why(self.est, idx)
        return ""

    def broken(self, idx: tuple[int, ...]) -> list[str]:
        return [n for n in NOTE_ORDER if not at(self.masks[n], idx)]

    def infeasible_note(self, idx: tuple[int, ...], where: str) -> str:
        broken = self.broken(idx)
        full = self.est.shape
        counts = ", ".join(f"{count_false_broadcast(self.masks[n], full)} fail {n}" for n in NOTE_ORDER)
        detail = next((d for n in DETAIL_ORDER if n in broken for d in [self.constraints[n].detail(self.est, idx)]
                       if d), "")
        labels = [self.constraints[n].label for n in broken]
        return (f"infeasible: no candidate meets every constraint; best available ({where}) fails "
                f"{' and '.join(labels) or 'nothing'}{detail}; of {math.prod(full)} candidates: {counts}")
