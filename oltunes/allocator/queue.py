"""The order of the lease queue, as the lease book sees it: `QueueOrder`, with arrival order (`ArrivalOrder`) built in.

The book knows no queue policy by name: other orders (shortest job first, Slurm's multifactor, RLTune's learnt
one) are the RLTune package's (`oltunes.rltune.service_queue.queue_order`), and whoever builds the book (the
tuning service) hands one in. The dependency points from the policies to the book, never back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["ArrivalOrder", "KeptOrder", "QueueOrder"]

ORDER_REFRESH_S = 1.0  # a kept order is asked again after this long (a time-aware policy moves with the clock)


class QueueOrder(Protocol):
    """Which waiting job gets capacity first."""

    name: str
    uses_runtime: bool  # reads ``expected_duration_s`` (the book then estimates it with ``Tuner.expect``)

    def release_order(self, waiting: Sequence[dict[str, Any]], pools: Sequence[dict[str, Any]],
                      now: float) -> list[str]:
        """Job ids of `waiting` (``job_id``, ``gpus``, ``submitted_s``, ``expected_duration_s``), first to run first,
        given each pool's free slots per device (``name``, ``gpus_per_node``, ``free_per_node``)."""
        ...


class ArrivalOrder:
    """First come, first served (the default): by ``submitted_s``, ties in the order the book lists them."""

    name = "fcfs"
    uses_runtime = False

    def release_order(self, waiting: Sequence[dict[str, Any]], pools: Sequence[dict[str, Any]],
                      now: float) -> list[str]:
        return [w["job_id"] for w in sorted(waiting, key=lambda w: w["submitted_s"])]


class KeptOrder:
    """The queue's last order, kept while its key (who waits, who holds a lease) stays and for at most
    `ORDER_REFRESH_S`: ordering 10,000 waiting jobs takes tens of milliseconds."""

    def __init__(self) -> None:
        self._key: object = None
        self._at = float("-inf")
        self._ids: list[str] = []
        self._rank: dict[str, int] = {}

    def ids(self, key: object, now: float, order: Callable[[float], list[str]]) -> list[str]:
        if key != self._key or now - self._at >= ORDER_REFRESH_S:
            self._key, self._at, self._ids = key, now, order(now)
            self._rank = {j: i for i, j in enumerate(self._ids)}
        return self._ids

    def rank(self, job_id: str) -> int:
        """The job's place in the order last returned by `ids`."""
        return self._rank[job_id]
