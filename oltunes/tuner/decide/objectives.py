"""Objectives: what "best" means among feasible candidates, registered by name (``Objective.make("energy")``).

Streaming jobs minimise energy per item *at the batch their arrival rate forms* (``effective_batch_energy``);
batch jobs their ``JobSpec.objective``: ``energy`` per item,
``completion_time`` (items / throughput) or ``cost`` per item (pool's hourly price / throughput). Each objective
also names a secondary one (it only orders candidates within ``near_equal`` of the best), the word a runner-up's
reason uses, and which predicted target's margin an optimistic explorer discounts it by.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from oltunes.registry import Registered
from oltunes.tuner.model.estimate import EN, THR, Estimate
from oltunes.types import JobSpec

__all__ = ["Objective", "objective_for"]


class Objective(Registered, root=True):
    """Base class: ``values(est)`` over the grid (lower is better)."""

    margin_target: ClassVar[int] = THR  # the target whose margin makes the objective optimistic

    def values(self, est: Estimate) -> np.ndarray:
        raise NotImplementedError

    def secondary(self, est: Estimate, flat: np.ndarray, p_idx: np.ndarray) -> np.ndarray:
        """Tie-break among near-equal cells (``flat``: raveled grid indices; ``p_idx``: their options)."""
        return est.energy.ravel()[flat]


def _cost_per_hour(est: Estimate) -> np.ndarray:
    return np.array([o.pool.accelerator.cost_per_hour for o in est.options])


class Energy(Objective, name="energy"):
    margin_target = EN

    def values(self, est: Estimate) -> np.ndarray:
        return effective_batch_energy(est)

    def secondary(self, est: Estimate, flat: np.ndarray, p_idx: np.ndarray) -> np.ndarray:
        return _cost_per_hour(est)[p_idx] / est.thr.ravel()[flat]  # cost per item


class CompletionTime(Objective, name="completion_time"):
    def values(self, est: Estimate) -> np.ndarray:
        return max(est.job.items, 1) / est.thr


class Cost(Objective, name="cost"):
    def values(self, est: Estimate) -> np.ndarray:
        return (_cost_per_hour(est) / 3600.0)[:, None, None, None] / est.thr


def effective_batch_energy(est: Estimate) -> np.ndarray:
    """Energy per item of each cell at the batch a streaming job's rate actually forms there.

    Dynamic batching takes what queued while the previous batch ran: about ``1 + rate x t1 / c`` requests, ``t1``
    the cell's smallest-batch latency (the prior's own ``b_eff``, ``Prior.adjust``). A configured batch larger than
    that saves no energy: it only runs partial batches, and the full batches a burst fills are slower. Each cell
    is therefore charged the energy of the largest configured batch size <= its effective batch, so the
    energy a larger batch promises counts only where the rate fills it. (A streaming job's measurements of a
    large batch at a low rate are partial batches too, so nothing measured would ever correct that promise.)
    Batch jobs and jobs without a rate: the configured batch.
    """
    job = est.job
    rate = job.arrival_rate_rps
    if job.kind != "streaming" or rate <= 0 or len(est.batch_sizes) == 1:
        return est.energy
    batches = np.array(est.batch_sizes, dtype=float)
    concurrencies = np.array(est.concurrencies, dtype=float)
    formed = 1.0 + rate * est.lat[:, :, :1, :] / 1000.0 / concurrencies  # P, V, 1, C: from the batch-1 latency
    top = np.searchsorted(batches, formed, side="right") - 1  # the largest configured batch <= it
    read_at = np.clip(np.minimum(top, np.arange(len(batches))[:, None]), 0, None)  # P, V, B, C
    return np.take_along_axis(est.energy, read_at, axis=2)


def objective_for(job: JobSpec) -> Objective:
    """Streaming jobs are judged by energy per item; batch jobs by the objective they ask for."""
    return Objective.make("energy" if job.kind == "streaming" else job.objective)
