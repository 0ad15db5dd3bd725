"""What changed in a cluster's list of placements, so a reader that indexed it earlier catches up in O(changes).

A producer that keeps a cluster's placements (the simulator's cluster) records each placement that joins the list
(at its end) or leaves it in a :class:`PlacementLog`, and hands out its list as :meth:`PlacementLog.snapshot`: a
plain ``list`` (so ``ClusterState.placements`` serialises, compares and validates as before) stamped with the log
and the log's version. A reader that indexed a snapshot of the same log (the tuner's ``Occupancy``) applies just the
changes between the two versions instead of comparing the whole list, whose cost grows with the cluster.

A list that is not a snapshot (a fresh HTTP request, a copy with placements added) carries no stamp, so readers
fall back to comparing lists; so does a reader whose version the log no longer holds (it keeps the latest changes
only). A snapshot is a view of one moment: the producer logs every change to its list (a reader takes two snapshots
of one version for the same list) and never changes a snapshot after handing it out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oltunes.types import Placement

__all__ = ["PlacementLog", "Snapshot"]


class Snapshot(list):
    """A list of placements as ``log`` had it at ``version``."""

    __slots__ = ("log", "version")


class PlacementLog:
    """Placements joining (at the end of) and leaving a list, in order; each change moves ``version`` by one.

    Examples
    --------
    >>> log = PlacementLog()
    >>> log.join("a"); log.join("b"); log.leave("a")
    >>> log.version, log.between(1, 3)
    (3, [('b', True), ('a', False)])
    >>> s = log.snapshot(["b"]); (s, s.version)
    (['b'], 3)
    """

    def __init__(self, keep: int = 4096) -> None:
        self._changes: list[tuple[Placement, bool]] = []  # (placement, joined)
        self._first = 0  # version before self._changes[0]
        self._keep = keep  # the log holds at least this many latest changes

    @property
    def version(self) -> int:
        return self._first + len(self._changes)

    def join(self, p: Placement) -> None:
        self._record(p, True)

    def leave(self, p: Placement) -> None:
        self._record(p, False)

    def _record(self, p: Placement, joined: bool) -> None:
        self._changes.append((p, joined))
        if len(self._changes) > 2 * self._keep:  # forget the oldest half (amortised O(1) per change)
            drop = len(self._changes) - self._keep
            del self._changes[:drop]
            self._first += drop

    def between(self, since: int, until: int) -> list[tuple[Placement, bool]] | None:
        """The changes from version ``since`` to ``until`` in order, or None when the log no longer holds them."""
        if not self._first <= since <= until <= self.version:
            return None
        return self._changes[since - self._first : until - self._first]

    def snapshot(self, placements: Iterable[Placement]) -> Snapshot:
        """``placements`` (the list as it is now) stamped with this log and its version."""
        s = Snapshot(placements)
        s.log, s.version = self, self.version
        return s
