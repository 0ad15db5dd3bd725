"""Vectorised evaluation of every (variant, batch, concurrency) for one device, from the performance model.

Used by the policies that may read the model: ``oracle`` (noiseless truth with the device's real co-runners and
load) and the offline-profile baselines (``static-profile``, ``gavel-like``: isolated, as a profiling run ahead of
time would measure). Arrays are shaped (variants, batches, concurrencies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oltunes.sim import calibration as cal
from oltunes.sim.perfmodel import Z99, PerformanceModel
from oltunes.types import JobSpec, Prediction, Variant


@dataclass
class Grid:
    variants: list[Variant]
    batches: np.ndarray
    concurrencies: np.ndarray
    p99_batch_ms: np.ndarray  # p99 latency of one batch
    p99_request_ms: np.ndarray  # estimated p99 request latency incl. queueing (streaming), = batch p99 for batch
    capacity_rps: np.ndarray  # items/s the configuration can serve
    rho: np.ndarray  # offered load / capacity (streaming), 1 for batch jobs
    energy_j_per_item: np.ndarray  # busy energy per item
    mean_batch_ms: np.ndarray  # mean latency of one full batch

    def argbest(self, feasible: np.ndarray, cost: np.ndarray) -> tuple[int, int, int] | None:
        """Index of the lowest-cost feasible cell (ties: more accurate variant, then fewer executors)."""
        if not feasible.any():
            return None
        acc = np.array([v.accuracy for v in self.variants])[:, None, None]
        key = np.where(feasible, cost - 1e-9 * acc + 1e-12 * self.concurrencies[None, None, :], np.inf)
        return tuple(int(x) for x in np.unravel_index(int(np.argmin(key)), key.shape))  # type: ignore[return-value]

    def prediction(self, i: tuple[int, int, int]) -> Prediction:
        """The cell's batch p99, busy energy per item and capacity, as the Decision's prediction."""
        return Prediction(
            latency_p99_ms=float(self.p99_batch_ms[i]),
            energy_j_per_item=float(self.energy_j_per_item[i]),
            throughput_items_per_s=float(self.capacity_rps[i]),
        )


def evaluate(
    model: PerformanceModel,
    job: JobSpec,
    accelerator: str,
    variants: list[Variant],
    batches: tuple[int, ...],
    concurrencies: tuple[int, ...],
    co: list[tuple[int, float]] | None = None,
) -> Grid:
    """Noiseless expected behaviour of each configuration on a device with co-runners ``co`` (variant, load)."""
    co = co or []
    vis = [model.variant_index(v.name) for v in variants]
    b = np.array(batches)
    c = np.array(concurrencies)
    lat = np.stack([model.latency_row(vi, accelerator)[b] for vi in vis])  # (V, B) ms
    sig = np.array([model.sigma(vi, accelerator) for vi in vis])
    inter = [model.interference(vi, co) for vi in vis]
    slow = np.array([s for s, _ in inter])
    sig = np.hypot(sig, np.array([e for _, e in inter]))[:, None, None]
    kappa = np.array([model.concurrency_factor(accelerator, int(x)) for x in c])
    s50 = lat[:, :, None] * slow[:, None, None] * kappa[None, None, :]
    mean = s50 * np.exp(sig**2 / 2)
    if job.kind == "streaming":
        own = job.arrival_rate_rps * (lat[:, :, None] * kappa[None, None, :] / 1000.0) / (b[None, :, None] * c)
    else:
        own = np.ones_like(s50)
    if co:
        share = np.maximum(1.0, (own + sum(load for _, load in co)) / cal.FACTORS[accelerator].packing)
        s50, mean = s50 * share, mean * share
    p99b = s50 * np.exp(Z99 * sig)
    cap = c[None, None, :] * b[None, :, None] * 1000.0 / mean
    if job.kind == "streaming":
        rho = job.arrival_rate_rps / cap
        # queueing on top of the batch time (M/D/1-like wait, p99 ~ ln(100)/2 times the mean wait)
        wait = np.where(rho < 1, mean * rho / np.maximum(1e-9, 1 - rho) * 2.3, np.inf)
        p99r = p99b + wait
    else:
        rho = np.ones_like(s50)
        p99r = p99b
    power = np.stack(
        [[model.busy_power_w(vi, accelerator, int(x)) for x in b] for vi in vis]
    )  # (V, B)
    energy = power[:, :, None] * mean / 1000.0 / b[None, :, None]
    return Grid(list(variants), b, c, p99b, p99r, cap, rho, energy, mean)
