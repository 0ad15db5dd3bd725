"""The grid evaluation behind ``PerformanceModel.grid`` (the ``oltunes.profiles.Profile`` interface): every
(variant, batch, concurrency) of one job on one device at once, vectorised; arrays shaped (V, B, C).

The same physics as :meth:`PerformanceModel.truth` (interference by pair class, concurrency overlap, time-slicing
with gavel packing, lognormal noise quantiles), plus a queueing estimate for streaming jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oltunes.profiles import Grid
from oltunes.sim import calibration as cal
from oltunes.sim.perfmodel import Z99, PerformanceModel
from oltunes.types import JobSpec, Variant


def evaluate(
    model: PerformanceModel,
    job: JobSpec,
    accelerator: str,
    variants: Sequence[Variant],
    batches: Sequence[int],
    concurrencies: Sequence[int],
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
        share = np.maximum(1.0, (own + sum(load for _, load in co)) / model.factor(accelerator).packing)
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
