"""Decisions recalled: the same question on the same options and model state gets the same answer.

Between two observations a tuner is often asked the same question again (a service's jobs come from a few
templates; a queue asks again for a job it could not place). Everything a decision weighs — the scored grid, the
constraints' verdict, the choice, the runner-ups and the note — is a pure function of the options list (kept by
the tuner while the cluster and the observation count are unchanged), the model's state and the job's
*question*: its family, kind, rate, SLO, accuracy floor, objective, items and learned burst backlog. The job's id
enters a decision only as its ``job_id`` and as the last member of a shared device's group (with its own
slowdown), so a recalled decision is rebuilt around the asking job's id from a template. The exploration draw is
not recalled: the caller draws it every time as before, and an exploring decision is made in full.

A recalled decision therefore equals, field for field, the one a full evaluation would make (new
``decision_id`` / ``group_id`` as always); skipping the verdict, the selection and the explanation takes a
repeated decision from ~0.25 ms to a few tens of microseconds.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from oltunes.types import ColocationGroup, Decision, JobSpec

__all__ = ["MAX_QUESTIONS", "DecisionMemo", "question"]

MAX_QUESTIONS = 256  # distinct questions kept per options list (more are decided in full, not kept)


def question(job: JobSpec, backlog: float | None) -> tuple:
    """Everything of a job a decision reads, less its id (``backlog``: its learned burst, read per job id)."""
    return (job.family, job.kind, job.arrival_rate_rps, job.slo_ms, job.accuracy_floor, job.objective, job.items,
            backlog)


class DecisionMemo:
    """Templates of decisions made on one options list under one model state (see the module docstring)."""

    def __init__(self) -> None:
        self._options: Sequence[Any] | None = None
        self._version: Hashable = None
        self._table: dict[tuple, tuple] = {}

    def table(self, options: Sequence[Any], version: Hashable) -> dict[tuple, tuple]:
        """The templates valid for this options list and state (a new table when either changed)."""
        if options is not self._options or version != self._version:
            self._options, self._version, self._table = options, version, {}
        return self._table

    def keep(self, table: dict, key: tuple, decision: Decision, slowdowns: tuple[dict, float] | None,
             settled: Any) -> None:
        """Keep ``decision`` (not explored, no ``current``) as the template of ``key``, with ``slowdowns`` (its
        group's members' predicted slowdowns and the asking job's own; None without a group) and the settled
        choice before the exploration draw (``Selector.settle``)."""
        if len(table) < MAX_QUESTIONS:  # (not cleared when full: freeing hundreds at once is a pause of its own)
            table[key] = (decision, slowdowns, settled)

    @staticmethod
    def recall(template: tuple[Decision, tuple[dict, float] | None], job: JobSpec) -> Decision:
        """The template's decision made for ``job``: its id in the decision and, last, in its group."""
        d, slowdowns = template
        group = d.group
        if group is not None:
            members, own = slowdowns
            sd = dict(members)
            sd[job.job_id] = own  # as the full path adds it: after the members' (in place if it is one of them)
            group = ColocationGroup(pool=group.pool, device=group.device, members=(*group.members[:-1], job.job_id),
                                    predicted_slowdown=sd)
        return Decision(job_id=job.job_id, candidate=d.candidate, group=group, source=d.source, feasible=d.feasible,
                        explanation=d.explanation)
