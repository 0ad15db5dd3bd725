"""Where a launcher's jobs live: the questions a flow asks about outputs, tuner state and history, answered once per
kind of launcher (``Launcher.environment``), so flows never branch on whether results are simulated.

- `OnDisk` (``local``, ``docker``): real workers write output shards under a locked directory, record their
  decision there (a re-run resumes it), learn in ``settings.home`` from real measurements only, and register
  their ONNX variants in MLflow.
- `Simulated` (``simulated``): the performance model answers; no output rows, no lock, no decision record, a
  tuner state of its own under ``<home>/simulated`` warm-started from simulated measurements only, the public
  profile table for profile-based policies, and the ``oltunes-simulation`` experiment for streaming steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oltunes.config import Settings
from oltunes.registry import Registered
from oltunes.types import Decision


class Environment(Registered, root=True):
    """The answers one kind of launcher gives (registered by name: ``Environment.make("disk")``).

    A batch job's directory (`output`) always exists (its part plan and run directories live there); whether
    the job writes output rows into it, locks it and records its decision there is the environment's answer.
    """

    #: Measurements made here carry this tag; warm start replays only measurements with the same tag.
    simulated: bool = False
    #: Variants are real ONNX files (registered in MLflow after a job); simulated variants are not.
    model_files: bool = True

    @contextlib.contextmanager
    def outputs_locked(self, output: Path, wait_s: float) -> Iterator[None]:
        """Hold `output`'s lock for the job's life: one run per output directory (two would race on its shards)."""
        from oltunes.locks import lock_dir

        lock = lock_dir(output, wait_s, what="parameter 'output': directory")
        try:
            yield
        finally:
            lock.release()

    def recorded_decision(self, output: Path) -> Decision | None:
        """The decision a job in `output` was started with (a re-run resumes with it); None when there is none."""
        from oltunes.launchers.batch_job import recorded_decision

        return recorded_decision(output)

    def record_decision(self, output: Path, decision: Decision) -> None:
        from oltunes.launchers.batch_job import record_decision

        record_decision(output, decision)

    def output_files(self, output: Path) -> int:
        """How many output shards the job in `output` holds."""
        from oltunes.launchers.batch_job import job_outputs

        return len(job_outputs(output))

    def reported_output(self, output: Path) -> str | None:
        """Where the job's outputs are, as reported to the user (None: it writes none)."""
        return str(output)

    def tuner_settings(self, settings: Settings) -> Settings:
        """The settings the tuner learns under (its state lives in ``settings.home``)."""
        return settings

    def profile(self, settings: Settings) -> Any | None:
        """The public profile table a profile-based policy decides from (None: none here)."""
        return None

    def experiment(self, kind: str) -> str:
        """The MLflow experiment a ``kind`` service (``streaming``) logs its steps to."""
        from oltunes.tracking.conventions import experiment_for

        return experiment_for(kind)


class OnDisk(Environment, name="disk"):
    """Real workers writing real outputs (the `Environment` defaults)."""


class Simulated(Environment, name="simulated"):
    """The simulator's performance model answers: no rows are written, and nothing mixes with real measurements."""

    simulated = True
    model_files = False

    @contextlib.contextmanager
    def outputs_locked(self, output: Path, wait_s: float) -> Iterator[None]:
        yield  # no output rows to race on

    def recorded_decision(self, output: Path) -> Decision | None:
        return None  # every run decides afresh: there are no finished shards to stay consistent with

    def record_decision(self, output: Path, decision: Decision) -> None:
        return None

    def output_files(self, output: Path) -> int:
        return 0

    def reported_output(self, output: Path) -> str | None:
        return None

    def tuner_settings(self, settings: Settings) -> Settings:
        # Simulated GPUs must never mix with real measurements: a tuner state of their own.
        return settings.model_copy(update={"home": settings.home / "simulated"})

    def profile(self, settings: Settings) -> Any:
        from oltunes.sim.perfmodel import load_performance_model

        return load_performance_model(settings)

    def experiment(self, kind: str) -> str:
        return super().experiment("simulation")
