"""`StateFileTuner`: the in-process tuner bound to its state file, safe when several processes share that file.

Two flows that each load the state, observe and save would each write over the other's observations. Here
``save()`` is a load -> apply -> save cycle under the file's lock (`state_lock`): when another process saved since
this one loaded, its state is loaded, this process's new measurements and variants are applied to it, and the
merged tuner is written and adopted (so this flow also learns from the other's). Every measurement is learnt once
(exactly-once by id), and none is lost to a concurrent save.

It implements `oltunes.tuner.protocol.TunerLike` method by method; nothing else of the `Tuner` shows through.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from pathlib import Path

from oltunes.tuner.tuner import Tuner
from oltunes.tuner.state import state_lock
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement, Prediction, Variant

__all__ = ["StateFileTuner"]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """Identity of the file's current version (an atomic save always makes a new inode)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class StateFileTuner:
    """A `Tuner` and the state file it was loaded from (`open`); ``save()`` merges with concurrent savers."""

    def __init__(self, tuner: Tuner, path: str | Path, stamp: tuple[int, int, int] | None = None):
        self.tuner, self.path = tuner, Path(path)
        self._stamp = stamp
        self._pending: list[Measurement] = []  # learnt since the last save

    @classmethod
    def open(cls, path: str | Path, new: Callable[[], Tuner]) -> StateFileTuner:
        """Load the state at `path`, or call `new()` when there is none."""
        with state_lock(path):
            stamp = _stamp(Path(path))
            return cls(Tuner.load(path) if stamp else new(), path, stamp)

    @property
    def n_observed(self) -> int:
        return self.tuner.n_observed

    def decide(self, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
        return self.tuner.decide(job, cluster, current)

    def expect(self, job: JobSpec, cluster: ClusterState) -> Prediction:
        return self.tuner.expect(job, cluster)

    def observe(self, m: Measurement) -> bool:
        return self.observe_many([m]) == [True]

    def observe_many(self, ms: Sequence[Measurement]) -> list[bool]:
        accepted = self.tuner.observe_many(ms)
        self._pending.extend(compress(ms, accepted))
        return accepted

    def add_variants(self, variants: Iterable[Variant]) -> int:
        return self.tuner.add_variants(variants)

    def save(self) -> Path:
        """Write the state to its file, merged with what other processes saved there meanwhile."""
        with state_lock(self.path):
            if _stamp(self.path) not in (None, self._stamp):
                merged = Tuner.load(self.path)
                merged.add_variants(self.tuner.variants)
                merged.observe_many(self._pending)
                self.tuner = merged
            self.tuner.save(self.path)
            self._stamp = _stamp(self.path)
            self._pending.clear()
        return self.path
