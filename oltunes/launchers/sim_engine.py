"""How the simulated environment builds the event engine of ``oltunes simulate`` (`oltunes.sim.engine.Simulator`),
for a streaming service (`oltunes.launchers.sim_serving`) and a batch part (`oltunes.launchers.simulated`) alike:
one physics everywhere."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from oltunes.config import Settings
from oltunes.sim.cluster import SimCluster
from oltunes.sim.engine import Simulator
from oltunes.sim.events import Event
from oltunes.sim.perfmodel import PerformanceModel, load_performance_model
from oltunes.sim.workload import SimJob
from oltunes.types import Pool


def engine_truth(model: PerformanceModel | None = None, settings: Settings | None = None) -> PerformanceModel:
    """A private copy of the public table (``model``, default the calibrated one) as the engine's truth: the
    engine registers the pools' accelerators in it and slows them down on drift events, which must never leak
    into the shared, cached table."""
    return (model if model is not None else load_performance_model(settings)).perturbed(0.0, 0)


def simulator(truth: PerformanceModel, pools: Sequence[Pool], jobs: list[SimJob], *, duration_s: float, seed: int,
              control_interval_s: float = 5.0, events: Sequence[Event] = ()) -> Simulator:  # fmt: skip
    """The engine over ``pools`` (its device drift drawn from ``seed``), stepped from outside."""
    return Simulator(truth, SimCluster(list(pools)), jobs, duration_s=duration_s, seed=seed,
                     control_interval_s=control_interval_s, events=list(events))  # fmt: skip


def run_seed(seed: int, ident: str) -> int:
    """The noise seed of one run, from the environment's seed and the run's identity: a re-run reproduces its
    numbers, and runs with other identities draw independent noise."""
    return int.from_bytes(hashlib.sha256(f"{seed}|{ident}".encode()).digest()[:8], "little")
