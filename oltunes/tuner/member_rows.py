"""A co-runner check's members as rows: each member's features with and without its co-runners, prior latencies,
batch-fill wait and SLO (what ``corunners`` scores with the newcomer added).

A member's own part — everything but its co-runners — is kept once per configuration and rate (``_MemberOwn``): its
features alone and their FM index arrays, its prior's load-free terms and its prior latency per co-load. A row adds
the co-runners, so a device that gained or lost a job builds rows for its members from their kept own parts: one
feature merge and, for a co-load not met before, one prior latency, per member.
"""

from __future__ import annotations

import numpy as np

from oltunes.learner.features import (
    batch_features,
    co_runner_features,
    concurrency_features,
    job_context,
    job_features,
    placement_features,
    variant_features,
)
from oltunes.tuner.candidates import CoLite, PlacementOption, fill_wait_ms
from oltunes.tuner.estimate import Estimator
from oltunes.tuner.member_prior import LOAD_LEVELS, prior_latency, prior_latency_heads
from oltunes.tuner.memo import put_bounded
from oltunes.tuner.prior_table import stream_rate

__all__ = ["MemberRow", "option_members"]

_LOADS = np.concatenate([[0.0], LOAD_LEVELS])  # a member's prior is read alone, then at each newcomer load level


class _MemberOwn:
    """A member's part its co-runners do not change: its features alone (``base_x``) and their FM index arrays
    (``alone``, set by ``corunners._index_new_rows``), its prior's load-free terms, its batch-fill wait, and its prior
    latency at each co-load met (``plats``: co-load -> read-only array, at 0 then at co-load + each load level)."""

    __slots__ = ("alone", "base_x", "heads", "plats", "wait")

    def __init__(self, base_x: dict[str, float], heads: tuple, wait: float) -> None:
        self.base_x, self.heads, self.wait = base_x, heads, wait
        self.alone: tuple[np.ndarray, np.ndarray] | None = None  # index([base_x])
        self.plats: dict[float, np.ndarray] = {}

    def prior_at(self, co_load: float) -> np.ndarray:
        """The prior log latency alone and at ``co_load`` + each load level (the prior reads the co-runners'
        summed load only, which many co-runner sets share)."""
        plat = self.plats.get(co_load)
        if plat is None:
            loads = co_load + _LOADS  # (co_load + each level, after the 0 that stands for alone)
            loads[0] = 0.0
            plat = self.plats[co_load] = prior_latency(self.heads, loads)
            plat.flags.writeable = False
        return plat


class MemberRow:
    """One member beside its co-runners: features with them (``x_with``) and alone (``x_alone``), prior latencies
    with them per load level and alone, batch-fill wait and SLO, and the FM index arrays of ``x_with`` per newcomer
    (``plans``: (family, sizes) -> rows, vals and overlap; valid while the vocabulary is: the row lives in
    ``est.memo``)."""

    __slots__ = ("own", "plans", "prior_alone", "prior_with", "slo", "x_with")

    def __init__(self, own: _MemberOwn, others: tuple[CoLite, ...], slo: float) -> None:
        plat = own.prior_at(sum([c.load for c in others]))
        self.own, self.slo = own, slo
        self.x_with = {**own.base_x, **co_runner_features(others)}
        self.prior_with, self.prior_alone = plat[1:], plat[0]
        self.plans: dict[tuple, tuple] = {}

    @property
    def x_alone(self) -> dict[str, float]:
        return self.own.base_x

    @property
    def wait(self) -> float:
        return self.own.wait


class _Tables:
    """The rows' tables, in the vocabulary-long memo (``est.memo``): per option object, its key part and rows; rows
    per what they read; own parts per configuration and rate (read with one version check per option)."""

    __slots__ = ("owns", "per_option", "rows")

    def __init__(self) -> None:
        self.per_option: dict[int, tuple] = {}
        self.rows: dict[tuple, MemberRow] = {}
        self.owns: dict[tuple, _MemberOwn] = {}


def option_members(est: Estimator, o: PlacementOption) -> tuple[PlacementOption, tuple, list[MemberRow]]:
    """One option's part of the checks' key (per member: what its checks read) and its members' rows, kept per
    option object: a pool that did not change hands the tuner's next decision the same options (a move changes
    two pools; the others' options are the same objects), so their members are keyed and planned once."""
    tables = est.memo.get("member_rows", _Tables)
    hit = tables.per_option.get(id(o))
    if hit is None or hit[0] is not o:
        key_part = (o.pool.name, o.device, o.loads, tuple([
            (mem.job_id, mem.candidate.variant.name, mem.candidate.batch_size, mem.candidate.concurrency, mem.slo_ms,
             mem.arrival_rate_rps) for mem in o.members]))
        hit = put_bounded(tables.per_option, id(o), (o, key_part, _option_rows(est, tables, o)))
    return hit


def _option_rows(est: Estimator, tables: _Tables, o: PlacementOption) -> list[MemberRow]:
    """The rows of an option's members, memoised per what they read — the member's configuration, rate and SLO, its
    device's pool, and its co-runners' (family, size, load) in order — so a cluster that changed elsewhere re-plans
    only the members that moved."""
    rows, owns = tables.rows, tables.owns
    acc = o.pool.accelerator
    where = (o.pool.name, acc.name, acc.max_w)
    co, members = o.co_features, o.members
    out = []
    for mem in members:
        cand, job_id = mem.candidate, mem.job_id
        own_key = (*where, cand.variant, cand.batch_size, cand.concurrency, mem.arrival_rate_rps)
        others = tuple([c for c, x in zip(co, members) if x.job_id != job_id])
        key = (own_key, mem.slo_ms, others)
        row = rows.get(key)
        if row is None:
            own = owns.get(own_key)
            if own is None:
                own = put_bounded(owns, own_key, _member_own(est, o, mem))
            row = put_bounded(rows, key, MemberRow(own, others, mem.slo_ms))
        out.append(row)
    return out


def _member_own(est: Estimator, o: PlacementOption, mem) -> _MemberOwn:
    """A member's features alone, prior base latencies (its batch and batch 1) and stream rate, batch-fill wait."""
    cand, acc = mem.candidate, o.pool.accelerator
    ctx = job_context(mem)
    base_x = {**job_features(ctx), **placement_features(o.pool.name, acc.name, ()),
              **variant_features(cand.variant), **batch_features(cand.batch_size),
              **concurrency_features(cand.concurrency)}
    lat0, _ = est.priors.base(acc, cand.variant, cand.batch_size)
    lat1, _ = est.priors.base(acc, cand.variant, 1)
    heads = prior_latency_heads(lat0, float(cand.batch_size), float(cand.concurrency), lat1,
                                stream_rate(ctx, est.priors.partial_batches))
    return _MemberOwn(base_x, heads, float(fill_wait_ms(float(cand.batch_size), mem.arrival_rate_rps)))
