"""Co-runner checks: does every job already on a device keep its SLO if the newcomer joins?

The one place that answers it, for the constraint (``constraints.CoRunners``), the decision's predicted slowdowns
(``decision``) and a pool's co-location groups (``grouping``, through ``Tuner._member_latency``).

For a shared device, each member's p99 is predicted (``Estimator.predict_log``) beside its other co-runners and the
newcomer, at the newcomer's size and its own predicted load (``LOAD_LEVELS``: a candidate is checked at the smallest
level >= its busy share ``rate / throughput``; batch jobs run flat out, the top level). A member keeps its SLO when
that latency with its margin, plus its batch-fill wait, is within its SLO. Its predicted slowdown is that latency
over its latency alone on the device.

A device's checks are kept until the model moves (``DeviceChecks``): between two observations most decisions see the
same shared devices again, and scoring a device is ten predictions per member (at 1,000 devices, 80 % of a
decision's time without it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oltunes.learner.features import job_context
from oltunes.tuner.decide.candidates import PlacementOption, fill_wait_ms
from oltunes.tuner.model.estimate import LAT, Estimator
from oltunes.types import CoRunner, JobSpec, Placement, Variant

__all__ = ["LOAD_LEVELS", "DeviceChecks", "MemberChecks", "keeps_slo", "load_level", "member_checks"]

# The newcomer's busy shares a member is checked at (a candidate uses the smallest level >= its own).
LOAD_LEVELS = np.array([0.25, 0.5, 1.0])


def load_level(busy: Any) -> Any:
    """Index into ``LOAD_LEVELS`` of the level a newcomer with this busy share is checked at."""
    return np.minimum(np.searchsorted(LOAD_LEVELS, busy), len(LOAD_LEVELS) - 1)


def keeps_slo(member: Placement, pessimistic_ms: Any) -> Any:
    """Whether a placed job keeps its SLO at this pessimistic p99 batch latency (+ its batch-fill wait)."""
    return pessimistic_ms + fill_wait_ms(float(member.candidate.batch_size), member.arrival_rate_rps) <= member.slo_ms


@dataclass
class MemberChecks:
    """``ok`` (P, V, L): every member of option p keeps its SLO with variant v joining at load level l;
    ``slow``: shared option p -> (its members' job ids, their predicted slowdowns (M, S, L) per newcomer size in
    ``sizes`` and load level)."""

    ok: np.ndarray
    sizes: tuple[str, ...] = ()
    slow: dict[int, tuple[tuple[str, ...], np.ndarray]] = field(default_factory=dict)

    def slowdowns(self, p: int, size: str, level: int) -> dict[str, float]:
        """Each member of option ``p``'s predicted slowdown with a newcomer of ``size`` at load level ``level``."""
        if p not in self.slow:
            return {}
        ids, slow = self.slow[p]
        s = self.sizes.index(size)
        return {jid: float(slow[i, s, level]) for i, jid in enumerate(ids)}


def member_checks(estimator: Estimator, options: Sequence[PlacementOption], variants: Sequence[Variant],
                  job: JobSpec, kept: DeviceChecks | None = None) -> MemberChecks:
    """The co-runner checks of a newcomer of ``job``'s family on every option (``kept``: devices' checks kept)."""
    sizes = tuple(sorted({v.size for v in variants}))
    ok = np.ones((len(options), len(variants), len(LOAD_LEVELS)), dtype=bool)
    shared = [p for p, o in enumerate(options) if o.members]
    if not shared:
        return MemberChecks(ok, sizes)
    kept = kept if kept is not None else DeviceChecks()
    checks = kept.of(estimator, [options[p] for p in shared], job.family, sizes)
    size_of = [sizes.index(v.size) for v in variants]
    ok[shared] = np.array([keeps for keeps, _, _ in checks])[:, size_of]
    return MemberChecks(ok, sizes, {p: (ids, slow) for p, (_, ids, slow) in zip(shared, checks)})


class DeviceChecks:
    """Each shared device's checks (``device_checks``), kept per what they read — the newcomer's family and sizes,
    the pool, and each member's configuration, SLO, rate and load — until the model moves (an observation, or the
    catalogue)."""

    def __init__(self) -> None:
        self._version: tuple | None = None
        self._kept: dict[tuple, tuple] = {}

    def of(self, estimator: Estimator, options: Sequence[PlacementOption], family: str,
           sizes: tuple[str, ...]) -> list[tuple[np.ndarray, tuple[str, ...], np.ndarray]]:
        version = (estimator.n_learned, estimator.model.parameters_version, estimator.catalogue.version)
        if version != self._version or len(self._kept) > 10_000:
            self._version, self._kept = version, {}
        keys = [(family, sizes, o.pool.name, o.pool.accelerator.name, o.loads,
                 tuple((m.job_id, m.candidate.key, m.slo_ms, m.arrival_rate_rps) for m in o.members))
                for o in options]
        new = [i for i, k in enumerate(keys) if k not in self._kept]
        if new:
            keeps, slow = device_checks(estimator, [options[i] for i in new], family, sizes)
            for i, k, (ids, s) in zip(new, keeps, slow):
                self._kept[keys[i]] = (k, ids, s)
        return [self._kept[k] for k in keys]


def device_checks(estimator: Estimator, options: Sequence[PlacementOption], family: str,
                  sizes: Sequence[str]) -> tuple[np.ndarray, list[tuple[tuple[str, ...], np.ndarray]]]:
    """For shared options: (n, S, L) whether every member keeps its SLO with a newcomer of ``family`` of each size
    at each load level, and per option its members' ids and slowdowns (M, S, L)."""
    newcomers = [CoRunner(job_id="newcomer", family=family, variant=family, size=s, load=float(level))
                 for s in sizes for level in LOAD_LEVELS]
    ctxs, cands, margin, members, counts = [], [], [], [], []
    for o in options:
        co = o.co_runners
        counts.append(len(o.members))
        for i, m in enumerate(o.members):
            others = co[:i] + co[i + 1:]
            here = m.candidate.model_copy(update={"pool": o.pool.name, "accelerator": o.pool.accelerator.name,
                                                  "co_runners": ()})
            cands.append(here)  # alone on the device
            cands += [here.model_copy(update={"co_runners": (*others, n)}) for n in newcomers]
            ctxs += [job_context(m)] * (1 + len(newcomers))
            margin.append(estimator.latency_margin(m.candidate))
            members.append(m)
    lat = estimator.predict_log(ctxs, cands)[:, LAT].reshape(len(margin), 1 + len(newcomers))
    alone = lat[:, 0]
    beside = lat[:, 1:].reshape(len(margin), len(sizes), len(LOAD_LEVELS))  # M, S, L
    pessimistic = np.exp(beside + np.array(margin)[:, None, None])
    keeps = np.array([keeps_slo(m, p) for m, p in zip(members, pessimistic)])
    slow = np.exp(beside - alone[:, None, None])
    starts = np.cumsum([0, *counts[:-1]])
    every = np.logical_and.reduceat(keeps, starts, axis=0)  # (every option has at least one member)
    ids = [tuple(m.job_id for m in o.members) for o in options]
    return every, [(i, slow[a:a + len(i)]) for i, a in zip(ids, starts.tolist())]
