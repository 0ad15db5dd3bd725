"""What an estimate holds: every candidate of one job over its grid of (placement option x variant x batch size x
concurrency), as arrays, and the cell-wise views a decision reads (a cell's prediction, key and candidate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oltunes.tuner.decide.candidates import PlacementOption
from oltunes.types import Candidate, JobSpec, Prediction, Variant

__all__ = ["Estimate"]


@dataclass
class Estimate:
    """Predictions over one job's candidate grid, shaped (P options, V variants, B batch sizes, C concurrencies)."""

    job: JobSpec
    options: list[PlacementOption]
    variants: list[Variant]
    batch_sizes: tuple[int, ...]
    concurrencies: tuple[int, ...]
    logp: np.ndarray  # 3, P, V, B, C: log (latency, energy, throughput)
    lat: np.ndarray  # P, V, B, C: batch p99 ms (mean prediction)
    energy: np.ndarray  # J per item
    thr: np.ndarray  # items/s
    marg: np.ndarray  # P, 3: log margins per option's accelerator
    visits: np.ndarray  # P, V: measurements of each (accelerator, variant)
    novel: np.ndarray  # P, V: each pair's novelty term of the log margins, novelty / sqrt(1 + visits)
    pess_lat: np.ndarray  # batch p99 with margin
    pess_thr: np.ndarray  # throughput less its margin (streaming), else the mean
    req_lat: np.ndarray  # what the SLO is checked against: pessimistic request latency
    no_capacity: bool = False  # every option is a full device (named only for the explanation)
    extra: dict[str, Any] = field(default_factory=dict)  # per-constraint intermediate results
    # values derived from the grid for this job's kind and rate only, shared by every estimate on that grid
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return self.logp.shape[1:]  # type: ignore[return-value]

    @property
    def regions(self) -> list[str]:
        return [o.pool.accelerator.name for o in self.options]

    def prediction(self, idx: tuple[int, ...]) -> Prediction:
        lat = self.lat.item(idx)  # (Python floats: the same doubles, and their difference the same subtraction)
        return Prediction.clamped(lat, self.energy.item(idx), self.thr.item(idx), self.pess_lat.item(idx) - lat)

    def key(self, idx: tuple[int, ...]) -> str:
        """``pool/variant/b<batch>/c<concurrency>/dev<device>[+shared]`` of one cell."""
        p, v, b, c = idx
        o = self.options[p]
        return (f"{o.pool.name}/{self.variants[v].name}/b{self.batch_sizes[b]}/c{self.concurrencies[c]}"
                f"/dev{o.device}" + ("+shared" if o.shared else ""))

    def candidate(self, idx: tuple[int, ...]) -> Candidate:
        p, v, b, c = idx
        o = self.options[p]
        return Candidate(pool=o.pool.name, accelerator=o.pool.accelerator.name, variant=self.variants[v],
                         batch_size=self.batch_sizes[b], concurrency=self.concurrencies[c], co_runners=o.co_runners)
