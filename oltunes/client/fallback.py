"""The decision a client makes when the tuning service is unreachable: conservative, and explainable without a
model (`safe_default`, its rule in its docstring; ``source="fallback"``)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from oltunes.errors import TunerUnavailable
from oltunes.types import Candidate, ClusterState, Decision, Explanation, JobSpec, Prediction, Variant

__all__ = ["safe_default"]


def safe_default(job: JobSpec, cluster: ClusterState, variants: Iterable[Variant], reason: str) -> Decision:
    """The decision used when the tuning service is unreachable: conservative, and explainable without a model.

    Rule
    ----
    1. Variant: among the known variants of ``job.family`` that meet ``job.accuracy_floor``, the smallest one
       (fewest ``params``, then fewest ``bytes``; a variant of unknown size, 0, counts as largest), ties broken
       by higher accuracy then name. The floor is the user's hard requirement; anything above it is acceptable,
       and the smallest such model has the best chance of meeting the latency SLO that cannot be checked here.
       If none meets the floor: the most accurate variant of the family, and ``feasible=False``.
    2. Pool: the pool with the most free slots (ties: more accelerator memory, then name), so the job is least
       likely to be slowed by co-runners. If no pool has a free slot, that pool anyway and ``feasible=False``.
    3. Batch size 1, concurrency 1, no co-location group: the lowest per-request latency and memory.

    The explanation says the service was unreachable and why, and carries no prediction (all zeros).

    Raises
    ------
    TunerUnavailable
        When no variant of ``job.family`` or no pool is known: there is nothing safe to pick.
    """
    family = sorted({v.name: v for v in variants if v.family == job.family}.values(), key=lambda v: v.name)
    if not family:
        raise TunerUnavailable(
            f"tuning service unreachable ({reason}) and no variant of family {job.family!r} is known for a safe "
            "default: pass variants= to TunerClient (or reach the service once so it caches them)"
        )
    if not cluster.pools:
        raise TunerUnavailable(f"tuning service unreachable ({reason}) and the cluster has no pools")

    meeting = [v for v in family if v.accuracy >= job.accuracy_floor]

    def size(v: Variant) -> tuple[float, float, float, str]:
        return (v.params or math.inf, v.bytes or math.inf, -v.accuracy, v.name)

    variant = min(meeting, key=size) if meeting else max(family, key=lambda v: (v.accuracy, v.name))
    free = {p.name: cluster.free_slots(p.name) for p in cluster.pools}
    pool = min(cluster.pools, key=lambda p: (-free[p.name], -p.accelerator.memory_gb, p.name))

    problems = []
    if not meeting:
        problems.append(
            f"no {job.family} variant meets accuracy floor {job.accuracy_floor:g} (best {variant.accuracy:g})"
        )
    if free[pool.name] <= 0:
        problems.append("no pool has a free slot")
    note = (
        f"tuning service unreachable ({reason}); safe default: smallest {job.family} variant meeting the accuracy "
        f"floor, batch 1, concurrency 1, on the pool with most free slots ({free[pool.name]}); SLO not checked"
        + (f"; infeasible: {'; '.join(problems)}" if problems else "")
    )
    return Decision(
        job_id=job.job_id,
        candidate=Candidate(
            pool=pool.name, accelerator=pool.accelerator.name, variant=variant, batch_size=1, concurrency=1
        ),
        source="fallback",
        feasible=not problems,
        explanation=Explanation(
            predicted=Prediction(latency_p99_ms=0.0, energy_j_per_item=0.0, throughput_items_per_s=0.0),
            n_candidates=len(family) * len(cluster.pools),
            n_feasible=0,
            note=note,
        ),
    )
