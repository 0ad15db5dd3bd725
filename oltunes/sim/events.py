"""Drift events of a scenario: at time ``at_s`` the world changes under the policies' feet.

::

    events:
      - {at_s: 150, kind: lose_devices, pool: a100, count: 2}          # devices fail; their jobs must be re-placed
      - {at_s: 150, kind: slow_accelerator, accelerator: t4, factor: 1.6}  # throttling, a driver change
      - {at_s: 150, kind: co_runner_burst, pool: v100, variant: gpt2-xl, load: 0.8, duration_s: 60}
      - {at_s: 150, kind: rate_step, factor: 2.0, families: [bert]}     # arrival rate steps (streaming jobs)

Each kind is a pydantic model (the ``kind`` field picks it) with one way to act: ``rate_step`` rewrites the request
trace when the workload is built, the others change the running simulation through the few primitives of
:class:`World` (the engine). The report measures every policy's violations before/after each event and its
recovery time (``metrics.event_impact``).
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class World(Protocol):
    """What an event may change in a running simulation (implemented by the engine)."""

    def lose_devices(self, pool: str, count: int, now: float) -> None: ...

    def slow_accelerator(self, accelerator: str, factor: float) -> None: ...

    def co_runner_burst(self, event: CoRunnerBurst, now: float) -> None: ...


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0, allow_inf_nan=False, description="simulated time the event happens")

    def apply(self, world: World, now: float) -> None:
        """Change the running simulation (default: nothing at run time)."""

    def reshape(self, family: str, arrivals: np.ndarray, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        """Change one streaming job's request arrivals when the workload is built (default: unchanged)."""
        return arrivals

    def summary(self) -> str:
        fields = self.model_dump(exclude={"kind", "at_s"}, exclude_none=True)
        return f"{self.kind} " + " ".join(f"{k}={v}" for k, v in fields.items())  # type: ignore[attr-defined]


class LoseDevices(_Event):
    """The pool's last ``count`` devices go away; the jobs on them wait to be placed again."""

    kind: Literal["lose_devices"]
    pool: str = Field(min_length=1, max_length=64)
    count: int = Field(ge=1, le=10_000)

    def apply(self, world: World, now: float) -> None:
        world.lose_devices(self.pool, self.count, now)


class SlowAccelerator(_Event):
    """Every device of this accelerator type runs ``factor`` times slower from now on."""

    kind: Literal["slow_accelerator"]
    accelerator: str = Field(min_length=1, max_length=64)
    factor: float = Field(gt=0, le=100, allow_inf_nan=False)

    def apply(self, world: World, now: float) -> None:
        world.slow_accelerator(self.accelerator, self.factor)


class CoRunnerBurst(_Event):
    """Tenants outside the scheduler's control take a slot on ``devices`` devices of a pool (default: all that have
    one free) for ``duration_s``, each keeping ``load`` of its device busy with ``variant``: interference and
    time-slicing for whoever shares the device. They are visible to policies as placements, like any lease."""

    kind: Literal["co_runner_burst"]
    pool: str = Field(min_length=1, max_length=64)
    variant: str = Field(min_length=1, max_length=128)
    load: float = Field(gt=0, le=1, allow_inf_nan=False)
    duration_s: float = Field(gt=0, allow_inf_nan=False)
    devices: int | None = Field(default=None, ge=1, le=10_000)

    def apply(self, world: World, now: float) -> None:
        world.co_runner_burst(self, now)


class RateStep(_Event):
    """From ``at_s`` on, streaming jobs of ``families`` (default: all) receive ``factor`` times the requests
    (below 1: Bernoulli thinning; above 1: shifted copies of the rest of the trace, as ``rate_scale`` does)."""

    kind: Literal["rate_step"]
    factor: float = Field(gt=0, le=20, allow_inf_nan=False)
    families: list[str] | None = Field(default=None, min_length=1, max_length=64)

    def reshape(self, family: str, arrivals: np.ndarray, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        if self.families is not None and family not in self.families:
            return arrivals
        from oltunes.sim.workload import scaled  # the one rate-scaling rule of the workload builder

        cut = int(np.searchsorted(arrivals, self.at_s))
        after = arrivals[cut:] - self.at_s
        if len(after) == 0:
            return arrivals
        return np.concatenate([arrivals[:cut], scaled(after, duration_s - self.at_s, self.factor, rng) + self.at_s])


Event = Annotated[LoseDevices | SlowAccelerator | CoRunnerBurst | RateStep, Field(discriminator="kind")]
