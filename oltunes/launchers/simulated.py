"""Simulated launcher: the event engine of ``oltunes simulate`` runs a batch part in simulated time, so the very
same flows can drive a heterogeneous GPU cluster end to end with the simulator's own physics (device drift,
drift events, interference from the co-runners the decision names). Every result is a `Measurement` with
``simulated=True`` and ``energy_source="simulated"``; no inference runs and no output rows are written. (A
simulated streaming service is served by the same engine: `oltunes.launchers.sim_serving`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oltunes.config import get_settings
from oltunes.errors import ConfigError, WorkerError
from oltunes.launchers.base import Handle, Launcher, WorkerResult, WorkerSpec
from oltunes.launchers.sim_engine import engine_truth, run_seed, simulator
from oltunes.sim.events import Event
from oltunes.sim.jobrun import JobRun
from oltunes.sim.workload import SimJob
from oltunes.types import Decision


class SimulatedLauncher(Launcher, name="simulated"):
    """Answer batch specs from `oltunes.sim.engine.Simulator.run_batch`.

    Parameters
    ----------
    model
        The public `PerformanceModel` (default the one calibrated on ``settings.shared_data``); each part runs
        on its own copy of it as the truth, so a part's slowdowns never leak into another.
    seed
        Seed of the devices' drift and of the noise (default ``settings.seed``).
    events
        Drift events (`oltunes.sim.events`) every part lives through, timed from the part's start.
    """

    def __init__(self, model: Any = None, seed: int | None = None, events: Sequence[Event] = ()):
        self.model = model
        self.seed = get_settings().seed if seed is None else seed
        self.events = list(events)

    def start(self, spec: WorkerSpec) -> Handle:
        if spec.mode != "batch":
            raise ConfigError(f"launcher 'simulated': mode {spec.mode!r} is not supported (batch only; a simulated "
                              "streaming service is served by the event engine, `Environment.make('simulated').serving`)")
        items = spec.items or spec.job.items
        if items < 1:
            raise ConfigError("launcher 'simulated': items must be >= 1 (set JobSpec.items or WorkerSpec.items)")
        job = SimJob(spec.job.model_copy(update={"items": items}), submit_s=0.0)
        sim = simulator(engine_truth(self.model), [spec.pool], [job], duration_s=float("inf"), seed=self.seed,
                        events=self.events)  # fmt: skip
        # noise per run from the seed and the run's identity: parallel parts draw independent noise, and a re-run
        # of the same part reproduces its numbers
        run = JobRun(job, seed=run_seed(self.seed, f"{spec.job.job_id}|{spec.run_dir}"))
        decision = Decision.model_construct(decision_id=spec.decision_id, job_id=spec.job.job_id,
                                            candidate=spec.candidate, group=None)  # fmt: skip
        m = sim.run_batch(run, decision)
        if not m.simulated:
            raise WorkerError("simulator returned a measurement not tagged simulated")
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
