"""`TunerLike`: the one interface flows, the lease book and the simulator's ``oltunes`` policy call a tuner through.

Three objects implement it, and callers never ask which one they hold:

* `oltunes.tuner.tuner.Tuner` — the tuner itself, in this process (its ``save`` takes the file to write);
* `oltunes.tuner.local.StateFileTuner` — a `Tuner` bound to its state file, which ``save()`` merges with what
  other processes (concurrent flows) saved there, so none of their observations is lost;
* `oltunes.client.tuner_client.TunerClient` — the tuning service over HTTP, with a fallback decision and an outbox that
  delivers every observation exactly once.

`oltunes.tuner.factory.get_tuner` picks the second or the third from the settings (``OLTUNES_TUNER_URL``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement, Prediction, Variant

__all__ = ["TunerLike"]


@runtime_checkable
class TunerLike(Protocol):
    """Ask (``decide``, ``expect``), tell (``observe``, ``observe_many``, ``add_variants``), keep (``save``)."""

    @property
    def n_observed(self) -> int | None:
        """Measurements the tuner has learnt, restored state included; None where that is the service's."""
        ...

    def decide(self, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
        """Where and how to run ``job`` on ``cluster``; ``current``: where it runs now (a re-tune weighs staying).
        Never None: an infeasible job gets a decision with ``feasible=False``."""
        ...

    def expect(self, job: JobSpec, cluster: ClusterState) -> Prediction:
        """What ``job`` is predicted to do where ``decide`` would put it, without deciding (no exploration draw)."""
        ...

    def observe(self, m: Measurement) -> bool:
        """Learn from one measurement; False when its ``measurement_id`` was already learnt (exactly-once)."""
        ...

    def observe_many(self, ms: Sequence[Measurement]) -> list[bool]:
        """Learn from several at once (a warm start, a control interval); per measurement, whether it was new."""
        ...

    def add_variants(self, variants: Iterable[Variant]) -> int:
        """Make variants known to the tuner (a known name replaces that variant); returns how many were given."""
        ...

    def save(self) -> Path | None:
        """Keep what was learnt: the state file written (in-process), or None where the service keeps its own."""
        ...
