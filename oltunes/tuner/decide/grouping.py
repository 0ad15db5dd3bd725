"""Co-running groups: which jobs on a pool may share one device.

Two jobs may share a device when the performance model predicts that, co-located, *each* keeps its p99
latency SLO (pessimistic prediction: mean x exp(margin), plus the batch-fill wait for streaming jobs).
The FM's co-runner features (``co_family``, ``co_fs``, ``co_load``) carry the learned interference, so a
compute-bound job paired with a memory-bound one (little mutual slowdown) scores better than two of a kind.

Greedy plan: rank feasible pairs by their worst member slowdown (most complementary first), open a group
per unused pair, grow it while every member stays within SLO (up to ``slots_per_device``), and leave the
rest alone (singleton groups). Groups get device numbers 0, 1, ... in that order; more groups than
``pool.count`` means the pool is over-subscribed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from oltunes.tuner.decide.candidates import co_runner_of
from oltunes.tuner.decide.corunners import keeps_slo
from oltunes.types import ColocationGroup, CoRunner, Placement, Pool

__all__ = ["plan_groups", "LatencyFn"]

# (pool name, placed job, its co-runners) -> (mean p99 ms, pessimistic p99 ms)
LatencyFn = Callable[[str, Placement, Sequence[CoRunner]], tuple[float, float]]


def group_check(pool: str, members: Sequence[Placement], latency: LatencyFn,
                alone: dict[str, float], load_of: Callable[[Placement], float] | None = None
                ) -> tuple[bool, dict[str, float]]:
    """Whether every member keeps its SLO when all share one device, and each member's slowdown.

    ``load_of`` gives each member's busy share of the device as its co-runners see it (default 1)."""
    ok = True
    slowdown: dict[str, float] = {}
    for m in members:
        co = [co_runner_of(o, load_of(o) if load_of else 1.0) for o in members if o.job_id != m.job_id]
        mean, pess = latency(pool, m, co)
        ok = ok and bool(keeps_slo(m, pess))
        slowdown[m.job_id] = mean / alone[m.job_id] if alone[m.job_id] > 0 else 1.0
    return ok, slowdown


def plan_groups(pool: Pool, placements: Sequence[Placement], latency: LatencyFn,
                load_of: Callable[[Placement], float] | None = None) -> list[ColocationGroup]:
    """Partition the jobs on ``pool`` into co-running groups that keep every member inside its SLO."""
    jobs = list(placements)
    alone = {j.job_id: latency(pool.name, j, ())[0] for j in jobs}
    pairs = []
    for i in range(len(jobs)):
        for k in range(i + 1, len(jobs)):
            ok, sd = group_check(pool.name, [jobs[i], jobs[k]], latency, alone, load_of)
            if ok:
                pairs.append((max(sd.values()), sum(sd.values()), i, k, sd))  # (i, k) unique: sd never compared
    pairs.sort()
    used: set[int] = set()
    groups: list[tuple[list[int], dict[str, float]]] = []
    for _, _, i, k, sd in pairs:
        if i in used or k in used or pool.slots_per_device < 2:
            continue
        members = [i, k]
        used.update(members)
        for j in range(len(jobs)):
            if j in used or len(members) >= pool.slots_per_device:
                continue
            ok, sd2 = group_check(pool.name, [jobs[x] for x in (*members, j)], latency, alone, load_of)
            if ok:
                members.append(j)
                used.add(j)
                sd = sd2
        groups.append((members, sd))
    for j in range(len(jobs)):
        if j not in used:
            groups.append(([j], {jobs[j].job_id: 1.0}))
    return [ColocationGroup(pool=pool.name, device=d, members=tuple(jobs[x].job_id for x in members),
                            predicted_slowdown=sd)
            for d, (members, sd) in enumerate(groups)]
