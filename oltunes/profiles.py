"""Performance profiles: what a policy may know about how each configuration performs, behind one interface.

A :class:`Profile` answers, for one job on one accelerator type, the expected p99 batch latency, p99 request latency
(queueing included, streaming), capacity, load and energy of every (variant, batch size, concurrency) at once, as a
:class:`Grid`. Two implementations, the same code (``oltunes.sim.perfmodel.PerformanceModel``):

* the **public profile table** — what a profiling run ahead of time gives a user; the static baselines and
  ``oltunes-profiled`` read it;
* the simulator's **truth** — the same table perturbed per (variant, accelerator) and by drift events; only the
  oracle may read it.

Policies depend on this module and on ``oltunes.types`` only, never on the simulator.

It also holds the accelerators' **published specs** (``ACCELERATOR_SPECS``: kind, peak dense FLOP/s per precision,
memory bandwidth), which the tuner's correction uses to tell which accelerators share behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from oltunes.types import Candidate, CoRunner, JobSpec, Prediction, Variant


@dataclass(frozen=True)
class AcceleratorSpec:
    """Vendor datasheet figures of one accelerator type (dense, no sparsity; CPU: a typical server socket share)."""

    kind: str  # "cpu" or "gpu": which accelerators a model variant behaves alike on
    fp32_tflops: float
    fp16_tflops: float  # tensor cores where the GPU has them
    memory_bandwidth_gbs: float


# Sources: NVIDIA datasheets (P100 PCIe, T4, L4, A10, V100 SXM2, A100 40 GB SXM, H100 SXM); CPU: 8 AVX2 cores,
# dual-channel DDR4.
ACCELERATOR_SPECS: dict[str, AcceleratorSpec] = {
    "cpu": AcceleratorSpec("cpu", 1.0, 1.0, 50),
    "p100": AcceleratorSpec("gpu", 9.3, 18.7, 732),
    "t4": AcceleratorSpec("gpu", 8.1, 65, 320),
    "l4": AcceleratorSpec("gpu", 30.3, 121, 300),
    "a10": AcceleratorSpec("gpu", 31.2, 125, 600),
    "v100": AcceleratorSpec("gpu", 15.7, 125, 900),
    "a100": AcceleratorSpec("gpu", 19.5, 312, 1555),
    "h100": AcceleratorSpec("gpu", 67, 989, 3350),
}


def accelerator_kind(name: str) -> str:
    """``cpu`` or ``gpu``; an accelerator type without a spec is taken for a GPU (pools name GPUs by model)."""
    spec = ACCELERATOR_SPECS.get(name)
    return spec.kind if spec is not None else "gpu"


@dataclass
class Grid:
    """Expected behaviour of every (variant, batch, concurrency) on one device; arrays shaped (V, B, C)."""

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


class Profile(Protocol):
    """Predicted performance per candidate configuration (module docstring)."""

    def variants(self) -> list[Variant]:
        """Every variant the profile covers."""
        ...

    def accelerators(self) -> list[str]:
        """Every accelerator type the profile covers."""
        ...

    def grid(self, job: JobSpec, accelerator: str, variants: Sequence[Variant], batches: Sequence[int],
             concurrencies: Sequence[int], co_runners: Sequence[CoRunner] = ()) -> Grid:
        """Noiseless expected behaviour of each configuration on a device shared with ``co_runners``."""
        ...

    def load(self, job: JobSpec, candidate: Candidate) -> float:
        """Busy share of its device a streaming job would keep at its expected rate (isolated)."""
        ...
