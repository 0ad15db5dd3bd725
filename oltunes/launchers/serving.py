"""The serving side of a streaming service, as its one control loop (``flows/streaming_inference.py``) sees it.

An environment (`oltunes.launchers.environment`) builds one `Serving` per service: real workers behind the
gateway under replayed traffic in wall time (`oltunes.launchers.gateway_serving`), or the simulator's event engine
in simulated time (`oltunes.launchers.sim_serving`). The loop only ever calls ``start``, ``switch``,
``measure_interval`` and ``drain``, so it never asks which one it drives; and ``shadow`` where the environment
can mirror live requests to a candidate (``supports_shadow``).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from oltunes.types import ClusterState, Decision, JobSpec, Measurement

if TYPE_CHECKING:
    from oltunes.gateway.shadow import ShadowBudget


@dataclass(frozen=True)
class ServiceSetup:
    """What every serving side is built from: the models' jobs (one per family), their arrivals, the clock."""

    jobs: list[JobSpec]
    arrivals: np.ndarray  # request offsets (s); every model replays them (empty without replay)
    duration_s: float
    control_interval_s: float
    cluster: ClusterState
    workdir: Path
    max_in_flight: int = 128
    max_delay_ms: float = 2.0
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 0
    token: str | None = None
    replay: bool = True  # False: no load generator; only the service's real clients are served and measured


@dataclass
class Interval:
    """One model's control interval: the learner's measurement and the step's other metrics (MLflow)."""

    measurement: Measurement
    metrics: dict[str, float] = field(default_factory=dict)
    shadow: Measurement | None = None  # the model's shadow over the same interval (purpose='shadow'), if it answered


@dataclass
class ServingReport:
    """The service's totals once drained."""

    requests: dict[str, int]
    failures: dict[str, int]
    request_latency: dict[str, float]  # p50/p95/p99 ms over the session
    restarts: int = 0
    url: str | None = None
    gateway_failures: dict[str, int] = field(default_factory=dict)
    per_model: list[dict[str, object]] = field(default_factory=list)  # requests and restarts, in job order


class Serving(ABC):
    """Serve the jobs of a `ServiceSetup`; model ``i`` is ``setup.jobs[i]``."""

    #: Where clients reach the service (None: nothing listens, e.g. simulated).
    url: str | None = None
    #: Whether `shadow` runs anything here.
    supports_shadow: bool = False

    async def shadow(self, model: int, decision: Decision | None, budget: ShadowBudget) -> str:
        """Mirror `budget`'s share of model ``model``'s live requests to a worker running ``decision`` (its job is
        the shadow's own) from now on, replacing any shadow it had; None: no shadow. How it went, for the log."""
        return "no shadows in this environment"

    @abstractmethod
    async def start(self) -> None:
        """Bring up what all models share (the gateway); no model is served before its first `switch`."""

    @abstractmethod
    async def switch(self, model: int, decision: Decision) -> str:
        """Serve model ``model`` as ``decision`` says from now on (the first call starts it); how it went, for the log."""

    @abstractmethod
    async def measure_interval(self, stop: asyncio.Event) -> list[Interval | None]:
        """Serve one control interval (ends early once ``stop`` is set) and measure it, per model (None: nothing
        was answered, nothing to learn)."""

    @property
    @abstractmethod
    def finished(self) -> bool:
        """The session is over (its duration, its traffic, or ``stop``): measure no more, re-tune no more."""

    @abstractmethod
    async def drain(self) -> ServingReport:
        """Finish what is in flight, stop everything started (always called, also on failure), report the totals."""
