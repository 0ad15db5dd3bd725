"""Simulated launcher: the simulator's performance model stands in for a batch worker, so the very same flows can
drive a heterogeneous GPU cluster end to end. Every result is a `Measurement` with ``simulated=True`` and
``energy_source="simulated"``; no inference runs and no output rows are written. (A simulated streaming service
is served by the event engine: `oltunes.launchers.sim_serving`, through the ``simulated`` environment.)
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from oltunes.config import get_settings
from oltunes.errors import ConfigError, WorkerError
from oltunes.launchers.base import Handle, Launcher, WorkerResult, WorkerSpec


class SimulatedLauncher(Launcher, name="simulated"):
    """Answer batch specs from `oltunes.sim.perfmodel.PerformanceModel.measure`.

    Parameters
    ----------
    model
        A `PerformanceModel`; default the one calibrated on ``settings.shared_data``.
    seed
        Seed of the noise generator (default ``settings.seed``).
    """

    def __init__(self, model: Any = None, seed: int | None = None):
        if model is None:
            from oltunes.sim.perfmodel import load_performance_model

            model = load_performance_model()
        self.model = model
        self.seed = get_settings().seed if seed is None else seed

    def _rng(self, spec: WorkerSpec) -> np.random.Generator:
        # One generator per run, derived from the seed and the run's identity: parallel parts get independent
        # noise, and a re-run of the same part reproduces its numbers.
        ident = hashlib.sha256(f"{spec.job.job_id}|{spec.run_dir}".encode()).digest()
        return np.random.default_rng([self.seed, int.from_bytes(ident[:8], "little")])

    def start(self, spec: WorkerSpec) -> Handle:
        if spec.mode != "batch":
            raise ConfigError(f"launcher 'simulated': mode {spec.mode!r} is not supported (batch only; a simulated "
                              "streaming service is served by the event engine, `Environment.make('simulated').serving`)")
        items = spec.items or spec.job.items
        if items < 1:
            raise ConfigError("launcher 'simulated': items must be >= 1 (set JobSpec.items or WorkerSpec.items)")
        m = self.model.measure(spec.job, spec.candidate, items=items, rng=self._rng(spec), decision_id=spec.decision_id)
        if not m.simulated:
            raise WorkerError("performance model returned a measurement not tagged simulated")
        h = Handle(spec=spec, launcher=self.name)
        h.result = WorkerResult(returncode=0, measurement=m, simulated=True)
        return h

    def wait(self, handle: Handle, timeout_s: float | None = None) -> WorkerResult:
        result = handle.result
        if result is None:
            raise WorkerError("simulated handle has no result")
        return result

    def alive(self, handle: Handle) -> bool:
        return False

    def stop(self, handle: Handle, grace_s: float = 10.0) -> int | None:
        return 0

    def logs(self, handle: Handle, tail: int = 50) -> str:
        m = handle.result.measurement if handle.result else None
        return f"simulated run: {m.model_dump_json() if m else '(none)'}"
