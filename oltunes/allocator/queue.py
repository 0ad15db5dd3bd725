"""The order of the lease queue, as the lease book sees it: `QueueOrder`, with arrival order (`ArrivalOrder`) built in.

The book knows no queue policy by name: other orders (shortest job first, Slurm's multifactor, RLTune's learnt
one) are the RLTune package's (`oltunes.rltune.service_queue.queue_order`), and whoever builds the book (the
tuning service) hands one in. The dependency points from the policies to the book, never back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["ArrivalOrder", "QueueOrder"]


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
