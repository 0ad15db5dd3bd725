"""Co-runner checks: does every job already on a device keep its SLO if the newcomer joins?

For a shared device, each member's latency is predicted with the FM's co-runner features at the newcomer's own
predicted load (``LOAD_LEVELS``: a candidate uses the smallest level >= its busy share ``rate / throughput``;
batch jobs run flat out, level 1). The newcomer enters a member's features only through additive co-runner
features that depend on its family, size and load, so one ``raw_sums`` call scores every (member, size, level).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from itertools import accumulate
from operator import is_
from typing import Any, NamedTuple

import numpy as np

from oltunes.learner.features import co_runner_features
from oltunes.learner.fm_scoring import stack_indexed
from oltunes.tuner.candidates import CoLite, PlacementOption
from oltunes.tuner.estimate import LAT, Estimator
from oltunes.tuner.member_kernels import member_logs, member_verdicts
from oltunes.tuner.member_prior import LOAD_LEVELS
from oltunes.tuner.member_rows import MemberRow, option_members
from oltunes.tuner.memo import put_bounded
from oltunes.types import Candidate, JobSpec, Variant

__all__ = ["LOAD_LEVELS", "MemberChecks", "load_level", "member_checks"]


def load_level(busy: Any) -> Any:
    """Index into ``LOAD_LEVELS`` of the level a newcomer with this busy share is checked at."""
    return np.minimum(np.searchsorted(LOAD_LEVELS, busy), len(LOAD_LEVELS) - 1)


class MemberChecks:
    """``ok`` (P, V, L): every member of option p keeps its SLO with variant v joining at load level l;
    ``slow`` (M, S, L): each member's predicted slowdown per newcomer size and level (for the explanation);
    ``by_option``: option -> [(member job id, row of slow)]. A decision reads ``slow`` and ``by_option`` for its
    chosen option only (if shared), so both are made on first read (``_Scored``), from the same arrays."""

    __slots__ = ("_scored", "ok")

    def __init__(self, ok: np.ndarray, scored: _Scored | None = None) -> None:
        self.ok, self._scored = ok, scored

    @property
    def slow(self) -> np.ndarray | None:
        return None if self._scored is None else self._scored.slow

    @property
    def by_option(self) -> dict[int, list[tuple[str, int]]]:
        return {} if self._scored is None else self._scored.by_option

    @property
    def sizes(self) -> tuple[str, ...]:
        return () if self._scored is None else self._scored.sizes

    def slowdowns(self, p: int, size: str, level: int) -> dict[str, float]:
        if self._scored is None:
            return {}
        j, slow = self.sizes.index(size), self.slow
        return {jid: float(slow[i, j, level]) for jid, i in self.by_option.get(p, [])}


class _Scored:
    """The members' predicted log latencies with and without the newcomer and where each option's members sit
    (what ``slow`` and ``by_option`` are made of, once, on first read)."""

    def __init__(self, sizes: tuple[str, ...], log_with: np.ndarray, log_alone: np.ndarray,
                 shared: np.ndarray, parts: Sequence[_OptionTerms]) -> None:
        self.sizes, self._log_with, self._log_alone = sizes, log_with, log_alone
        self._shared, self._parts = shared, parts

    @cached_property
    def slow(self) -> np.ndarray:
        return np.exp(self._log_with - self._log_alone[:, None, None])

    @cached_property
    def by_option(self) -> dict[int, list[tuple[str, int]]]:
        out, i = {}, 0
        for p, t in zip(self._shared.tolist(), self._parts):
            out[p] = [(jid, i + j) for j, jid in enumerate(t.job_ids)]
            i += len(t.job_ids)
        return out


def member_checks(est: Estimator, options: Sequence[PlacementOption], variants: Sequence[Variant],
                  job: JobSpec) -> MemberChecks:
    # The tuner hands the very same options list to consecutive decisions while nothing changed: skip the key.
    # Only the last list per family can come again (the tuner keeps one), so one slot each: a new list replaces
    # the old one, whose objects (a request's whole cluster, for the HTTP service) are freed one list at a time
    # instead of dozens at once when a bounded table fills (a 1-3 ms pause in whichever decision hit the bound).
    tables = est.member_memo.get("corunners", _Tables)
    hit = tables.by_options.get(job.family)
    if hit is None or hit[0] is not options:
        hit = tables.by_options[job.family] = (options, _member_checks(est, options, variants, job))
    checks = hit[1]
    return MemberChecks(checks.ok.copy(), checks._scored)


class _Tables:
    """The checks' tables, in the memo that lives while the model holds (``est.member_memo``): the last checks per
    family with their options list, each option's terms (``_kept_terms``), the last stack per newcomer and the
    newcomer's FM terms (read with one version check per decision)."""

    __slots__ = ("by_options", "newcomer_terms", "option_terms", "stacks")

    def __init__(self) -> None:
        self.by_options: dict[str, tuple] = {}
        self.option_terms: dict[tuple, Any] = {}
        self.stacks: dict[tuple, tuple] = {}
        self.newcomer_terms: dict[tuple, tuple] = {}


def _member_checks(est: Estimator, options: Sequence[PlacementOption], variants: Sequence[Variant],
                   job: JobSpec) -> MemberChecks:
    shared = [(p, o) for p, o in enumerate(options) if o.members]
    if not shared:
        return MemberChecks(np.ones((len(options), len(variants), len(LOAD_LEVELS)), dtype=bool))
    sizes = tuple(sorted({v.size for v in variants}))
    xd_key = (job.family, sizes)
    # Each shared option's part (its members' terms) is kept until the model moves (``member_memo``'s version):
    # a decision re-reads the options that did not change and stacks them; only the sums that mix every member
    # (the FM's cross terms, a BLAS product whose rounding depends on the stack) are made per decision.
    tables = est.member_memo.get("corunners", _Tables)
    table = tables.option_terms
    parts = [_kept_terms(est, table, o, xd_key) for _, o in shared]
    pending = [i for i, t in enumerate(parts) if type(t) is _Pending]
    plan = _newcomer_plan(est, xd_key)  # (the newcomer's index arrays: the same object while the vocabulary holds)
    if pending:  # the options met for the first time, built together (every value is computed row by row)
        for i, terms in zip(pending, _build_terms(est, [parts[i] for i in pending], xd_key, plan)):
            parts[i] = _keep(table, parts[i], terms, xd_key)
    return _checks_of(est, tables, options, variants, shared, parts, xd_key, plan)


def _checks_of(est: Estimator, tables: _Tables, options, variants, shared, parts: list[_OptionTerms], xd_key: tuple,
               plan: tuple) -> MemberChecks:
    # The same options' terms in the same order as the last decision of this family (a move elsewhere, a newcomer
    # placed on an empty device) stack to the same rows: the sums are those of last time, bit for bit. Kept per
    # family while the model holds (``member_memo``), with the parts (their ids stay unique meanwhile).
    stacks = tables.stacks
    hit = stacks.get(xd_key)
    if hit is None or hit[1] is not plan or len(hit[0]) != len(parts) or not all(map(is_, hit[0], parts)):
        starts = np.array([0, *accumulate(len(t.job_ids) for t in parts[:-1])], dtype=np.intp)  # each part's 1st row
        hit = stacks[xd_key] = (parts, plan, *_scored(est, tables, parts, plan, xd_key), starts)
    _, _, packed, log_with, slowed, starts = hit
    sizes = xd_key[1]
    size_of = np.array([sizes.index(v.size) for v in variants], dtype=np.intp)
    option_of = np.array([p for p, _ in shared], dtype=np.intp)
    ok = member_verdicts(slowed, packed, len(packed[0]) - len(LOAD_LEVELS) - 5, size_of, starts, option_of,
                         len(options))
    return MemberChecks(ok, _Scored(sizes, log_with, packed[:, -1], option_of, parts))


def _scored(est: Estimator, tables: _Tables, parts: list[_OptionTerms], plan: tuple,
            xd_key: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stacked members' packed terms, log latencies with the newcomer (M, S, L) and their SLO-check values
    (``exp(log latency + margin)``): the FM's sums over the whole stack (their rounding depends on it)."""
    sizes = xd_key[1]
    L = len(LOAD_LEVELS)
    T = parts[0].packed.shape[1] - L - 5  # (the FM's targets: ``_OptionTerms``' columns)
    packed = parts[0].packed if len(parts) == 1 else np.concatenate([t.packed for t in parts])
    s_a = parts[0].s_a if len(parts) == 1 else np.concatenate([t.s_a for t in parts])
    M = packed.shape[0]
    rows_d, vals_d = plan
    a_at = None  # the overlap of a member's keys with the newcomer's, if any member has one
    if any(t.overlap is not None for t in parts):
        a_at = np.zeros((M, *rows_d.shape))
        at = 0
        for t in parts:
            if t.overlap is not None:
                a_at[at:at + len(t.job_ids)] = t.overlap
            at += len(t.job_ids)
    d_terms = tables.newcomer_terms.get(xd_key)
    if d_terms is None:
        d_terms = tables.newcomer_terms[xd_key] = est.model.newcomer_terms(rows_d, vals_d)
    raw = est.model.raw_sums_of((packed[:, :T], s_a), d_terms, vals_d, a_at)
    log_with, with_margin = member_logs(raw[:, :, LAT], packed, T, len(sizes))  # M, S, L
    return packed, log_with, np.exp(with_margin)


class _OptionTerms(NamedTuple):
    """One shared option's members as the checks read them, row per member: ``packed`` = the FM's own output of
    the member beside its co-runners (``row_terms``, T columns), its prior log latency per newcomer load level
    (L), batch-fill wait, SLO, log latency margin, pooled correction and log latency alone; ``s_a`` its latent
    sums; ``overlap`` its keys' overlap with the newcomer's (``sums_plan``'s ``a_at``; None: none)."""

    job_ids: tuple[str, ...]
    packed: np.ndarray
    s_a: np.ndarray
    overlap: np.ndarray | None


class _Pending(NamedTuple):
    """An option whose terms are to be built: its members' rows, and the keys they will be kept under."""

    option: PlacementOption
    rows: list[MemberRow]
    same: tuple
    content: tuple


def _kept_terms(est: Estimator, table: dict, o: PlacementOption, xd_key: tuple) -> _OptionTerms | _Pending:
    """An option's terms, kept per option object (a pool that did not change hands the next decision the same
    options), per its placements (a new object for the same ones: placements are frozen, so the same objects on
    the same device at the same loads read the same) and per what they read (members moved back where they were);
    else what building them needs."""
    hit = table.get((id(o), xd_key))
    if hit is not None and hit[0] is o:
        return hit[1]
    acc = o.pool.accelerator
    same = (xd_key, o.pool.name, acc.name, acc.max_w, o.device, o.loads, tuple(map(id, o.members)))
    kept = table.get(same)
    if kept is not None and all(map(is_, kept[0], o.members)):
        terms = kept[1]
    else:
        _, key_part, rows = option_members(est, o)
        content = (xd_key, acc.name, acc.max_w, key_part)
        terms = table.get(content)
        if terms is None:
            return _Pending(o, rows, same, content)
        put_bounded(table, same, (o.members, terms))  # holds the members: their ids stay unique meanwhile
    put_bounded(table, (id(o), xd_key), (o, terms))  # holds o: its id stays unique meanwhile
    return terms


def _keep(table: dict, pending: _Pending, terms: _OptionTerms, xd_key: tuple) -> _OptionTerms:
    o = pending.option
    put_bounded(table, pending.content, terms)
    put_bounded(table, pending.same, (o.members, terms))
    put_bounded(table, (id(o), xd_key), (o, terms))
    return terms


def _build_terms(est: Estimator, pending: Sequence[_Pending], xd_key: tuple, plan: tuple) -> list[_OptionTerms]:
    """The options' rows planned (each member's index arrays are kept with its row, ``_index_new_rows``) and
    scored together: every value is computed row by row, so any stack of options' terms is what scoring the
    stacked rows gives (``tests/tuner/test_member_rows.py`` checks it against the plain sums over every member)."""
    rows = [r for p in pending for r in p.rows]
    members = [m for p in pending for m in p.option.members]
    _index_new_rows(est, rows, xd_key, plan)
    pieces = [r.plans[xd_key] for r in rows]
    # the rows with co-runners and alone scored in one call (row by row: the same values as two calls)
    y_a, s_a, raw_alone = est.model.row_terms_and_raw(
        *stack_indexed([(p[0], p[1]) for p in pieces] + [r.own.alone for r in rows]), len(rows))
    memo = est.per_observation.table("member_terms")  # margins and corrections move per observation
    # per row: batch-fill wait, SLO, log latency margin, pooled correction (packed's columns in order), prior alone
    per_row = np.array([(r.own.wait, r.slo, *_member_terms(est, memo, m.candidate), r.prior_alone)
                        for r, m in zip(rows, members)])
    log_alone = raw_alone[:, LAT] + per_row[:, 4] + per_row[:, 3]
    T, L = y_a.shape[1], len(LOAD_LEVELS)
    packed = np.empty((len(rows), T + L + 5))
    packed[:, :T] = y_a
    packed[:, T:T + L] = [r.prior_with for r in rows]
    packed[:, T + L:T + L + 4] = per_row[:, :4]
    packed[:, T + L + 4] = log_alone
    out, at = [], 0
    for p in pending:
        n = len(p.rows)
        mine = pieces[at:at + n]
        overlap = None
        if any(q[2] is not None for q in mine):
            overlap = np.zeros((n, *next(q[2] for q in mine if q[2] is not None).shape))
            for i, q in enumerate(mine):
                if q[2] is not None:
                    overlap[i] = q[2]
        out.append(_OptionTerms(tuple(m.job_id for m in p.option.members), packed[at:at + n], s_a[at:at + n],
                                overlap))
        at += n
    return out


def _member_terms(est: Estimator, memo: dict, c: Candidate) -> tuple[float, float]:
    """A member's log latency margin and pooled correction: they change with every observation, not with the
    cluster, so a burst of decisions between two observations reads them once per configuration (``memo``: the
    per-observation table)."""
    key = (c.accelerator, c.variant, c.batch_size, c.concurrency)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = (est.latency_margin(c), np.reshape(est.correction_of(c), -1)[LAT])
    return hit


def _newcomer(est: Estimator, xd_key: tuple) -> list[dict[str, float]]:
    """The co-runner features a newcomer of this (family, sizes) adds to a member, per (size, load level)."""
    family, sizes = xd_key
    return est.memo.get(("newcomer", xd_key), lambda: [co_runner_features([CoLite(family, s, float(level))])
                                                       for s in sizes for level in LOAD_LEVELS])


def _newcomer_plan(est: Estimator, xd_key: tuple) -> tuple:
    """The FM's index arrays of the newcomer's features (kept while the vocabulary is)."""
    return est.memo.get(("newcomer_plan", xd_key), lambda: est.model.index(_newcomer(est, xd_key)))


def _index_new_rows(est: Estimator, rows: Sequence[MemberRow], xd_key: tuple, plan: tuple) -> None:
    """Index the rows not indexed yet for this newcomer (with co-runners; alone, their own parts not indexed yet) in
    one ``index`` call, find their keys' overlap with the newcomer's (``overlap``: ``sums_plan``'s ``a_at``), and keep
    each row's share (its own row of those arrays, cut to the width ``index`` gives one feature dict: the same
    arrays whatever else the call indexed)."""
    new = list({id(r): r for r in rows if xd_key not in r.plans}.values())
    if not new:
        return
    n = len(new)
    owns = list({id(r.own): r.own for r in new if r.own.alone is None}.values())
    rows_a, vals_a = est.model.index([r.x_with for r in new] + [own.base_x for own in owns])
    a_at = est.model.overlap(rows_a[:n], vals_a[:n], *plan)
    for i, r in enumerate(new):
        w = len(r.x_with) or 1
        mine = None if a_at is None or not a_at[i].any() else a_at[i]
        r.plans[xd_key] = (rows_a[i : i + 1, :w], vals_a[i : i + 1, :w], mine)
    for i, own in enumerate(owns, n):
        w = len(own.base_x) or 1
        own.alone = (rows_a[i : i + 1, :w], vals_a[i : i + 1, :w])
