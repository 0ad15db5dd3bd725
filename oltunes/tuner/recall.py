"""Decisions recalled: the same question on the same options and model state gets the same answer.

Between two observations a tuner is often asked the same question again (a service's jobs come from a few
templates; a queue asks again for a job it could not place). Everything a decision weighs — the scored grid, the
constraints' verdict, the choice, the runner-ups and the note — is a pure function of the options list (kept by
the tuner while the cluster and the observation count are unchanged), the model's state and the job's
*question*: its family, kind, rate, SLO, accuracy floor, objective, items and learned burst backlog. The job's id
enters a decision only as its ``job_id`` and as the last member of a shared device's group (with its own
slowdown), so a recalled decision is rebuilt around the asking job's id from a template. The exploration draw is
not recalled: the caller draws it every time as before, and an exploring decision is made in full.

Options lists are compared by value (``DecisionMemo.table``): equal options give equal decisions, whichever
objects describe them. A recalled decision therefore equals, field for field, the one a full evaluation would
make (new ``decision_id`` / ``group_id`` as always); skipping the verdict, the selection and the explanation
takes a repeated decision from ~0.27 ms to ~0.02 ms (``benchmarks.tuner_latency``, 3,060 candidates).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from oltunes.tuner import built
from oltunes.types import Decision, JobSpec

__all__ = ["KEPT_LISTS", "MAX_QUESTIONS", "DecisionMemo", "question"]

MAX_QUESTIONS = 256  # distinct questions kept per options list (more are decided in full, not kept)
KEPT_LISTS = 2  # options lists whose tables are kept


def question(job: JobSpec, backlog: float | None) -> tuple:
    """Everything of a job a decision reads, less its id (``backlog``: its learned burst, read per job id)."""
    return (job.family, job.kind, job.arrival_rate_rps, job.slo_ms, job.accuracy_floor, job.objective, job.items,
            backlog)


class DecisionMemo:
    """Templates of decisions made on one options list under one model state (see the module docstring).

    The tables of the last ``KEPT_LISTS`` options lists are kept: a new list equal to one of them (options compare
    by value: pool, device, members, free memory and slots, loads) gets its table. A caller whose cluster comes
    back after another caller's (an in-process user between HTTP requests), or the HTTP service itself (every
    request brings new objects describing the same cluster), finds its answers again instead of starting over."""

    def __init__(self) -> None:
        self._kept: list[list] = []  # [options, version, table], the most recently used first

    def table(self, options: Sequence[Any], version: Hashable) -> dict[tuple, tuple]:
        """The templates valid for this options list and state (a new table when no kept list equals it)."""
        kept = self._kept
        if kept and kept[0][0] is options and kept[0][1] == version:
            return kept[0][2]
        for i, entry in enumerate(kept):
            # (list equality: the same objects compare in C; new objects by value, stopping at the first change)
            if entry[1] == version and (entry[0] is options or entry[0] == options):
                entry[0] = options  # the list the tuner hands next time (its identity is the fast check)
                kept.insert(0, kept.pop(i))
                return entry[2]
        kept.insert(0, [options, version, {}])
        del kept[KEPT_LISTS:]
        return kept[0][2]

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
            group = built.group(group.pool, group.device, (*group.members[:-1], job.job_id), sd)
        return built.decision(job.job_id, d.candidate, group, d.source, d.feasible, d.explanation)
