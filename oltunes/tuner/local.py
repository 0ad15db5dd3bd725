"""The in-process tuner bound to its state file, safe when several processes (flows) share that file.

Two flows that each load the state, observe and save would each write over the other's observations. Here
`LocalTuner.save` is a load -> apply -> save cycle under the file's lock (`state_lock`): when another process
saved since this one loaded, its state is loaded, this process's new measurements and variants are applied to
it, and the merged tuner is written and adopted (so this flow also learns from the other's). Every measurement
is learnt once (exactly-once by id), and none is lost to a concurrent save.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from oltunes.tuner.core import Tuner
from oltunes.tuner.state import state_lock
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """Identity of the file's current version (an atomic save always makes a new inode)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class LocalTuner:
    """A `Tuner` plus the state file it was loaded from; everything but `save` is the tuner's own."""

    def __init__(self, tuner: Tuner, path: str | Path, stamp: tuple[int, int, int] | None = None):
        self.tuner, self.path = tuner, Path(path)
        self._stamp = stamp
        self._pending: list[Measurement] = []  # learnt since the last save

    @classmethod
    def open(cls, path: str | Path, new: Callable[[], Tuner]) -> LocalTuner:
        """Load the state at `path`, or call `new()` when there is none."""
        with state_lock(path):
            stamp = _stamp(Path(path))
            return cls(Tuner.load(path) if stamp else new(), path, stamp)

    def recommend(self, job: JobSpec, cluster: ClusterState, *, current: Placement | None = None) -> Decision:
        return self.tuner.recommend(job, cluster, current=current)

    def observe(self, m: Measurement) -> bool:
        accepted = self.tuner.observe(m)
        if accepted:
            self._pending.append(m)
        return accepted

    def replay(self, measurements: Iterable[Measurement]) -> int:
        return sum(1 for m in measurements if self.observe(m))

    def save(self, path: str | Path | None = None) -> Path:
        """Write the state to its file, merged with what other processes saved there meanwhile."""
        if path is not None and Path(path) != self.path:  # a copy elsewhere: nothing shared to merge with
            return self.tuner.save(path)
        with state_lock(self.path):
            if _stamp(self.path) not in (None, self._stamp):
                merged = Tuner.load(self.path)
                merged.add_variants(self.tuner.variants)
                merged.replay(self._pending)
                self.tuner = merged
            self.tuner.save(self.path)
            self._stamp = _stamp(self.path)
            self._pending.clear()
        return self.path

    def __getattr__(self, name: str) -> Any:  # predict, add_variants, has_seen, state_dict, n_observed...
        return getattr(self.tuner, name)
