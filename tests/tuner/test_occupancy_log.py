"""An index synced from placement-log snapshots (what the simulator's cluster hands out) shows exactly what a fresh
index of the same list shows, whatever happened in between: jobs placed, removed, moved, a job excluded, the log
trimmed past the index's version, a plain copy or fresh objects (the HTTP path) in between; and a snapshot of the
same log is applied from its changes, never by comparing lists."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.placement_log import PlacementLog, Snapshot
from oltunes.tuner.candidates import placement_options
from oltunes.tuner.occupancy import Occupancy
from oltunes.types import ClusterState, Placement
from tests.tuner.test_occupancy import _placement
from tests.tuner.test_placement_scale import brute_force_options, random_cluster
from tests.tuner.variants import make_variants


class _Book:
    """A producer like the simulator's cluster: placements by job id (insertion order), every change logged."""

    def __init__(self, placements: list[Placement], keep: int) -> None:
        self.log = PlacementLog(keep=keep)
        self.placements: dict[str, Placement] = {}
        for p in placements:
            self.place(p)

    def place(self, p: Placement) -> None:
        self.placements[p.job_id] = p
        self.log.join(p)

    def remove(self, job_id: str) -> Placement:
        p = self.placements.pop(job_id)
        self.log.leave(p)
        return p

    def snapshot(self) -> Snapshot:
        return self.log.snapshot(self.placements.values())


def _step(rng, variants, pools, book: _Book, step: int) -> None:
    jobs = list(book.placements)
    kind = rng.choice(["add", "remove", "move", "burst", "idle"])
    if kind == "add" or not jobs:
        for k in range(int(rng.integers(1, 4))):
            book.place(_placement(rng, variants, pools[int(rng.integers(len(pools)))], f"s{step}-{k}"))
    elif kind == "remove":
        book.remove(jobs[int(rng.integers(len(jobs)))])
    elif kind == "move":  # a re-tuned job: out, then back as a new object (or the same one) at the end
        p = book.remove(jobs[int(rng.integers(len(jobs)))])
        pool = next(x for x in pools if x.name == p.pool)
        book.place(p if rng.random() < 0.3 else p.model_copy(update={"device": int(rng.integers(pool.count))}))
    elif kind == "burst":  # many changes between two decisions (devices lost, batch jobs done)
        for j in rng.choice(jobs, size=min(len(jobs), int(rng.integers(1, 12))), replace=False):
            book.remove(str(j))


def _same_view(occ: Occupancy, pools, placements: list[Placement], exclude: str | None, rng) -> None:
    fresh = Occupancy.of(placements, exclude=exclude)
    cluster = ClusterState.model_construct(pools=pools, placements=[p for p in placements if p.job_id != exclude])
    pool = pools[int(rng.integers(len(pools)))]
    include = (pool.name, int(rng.integers(pool.count)))
    load_of = (lambda p: 0.5 if p.arrival_rate_rps else 1.0)
    for kw in ({}, {"include": include}, {"ignore_capacity": True}, {"load_of": load_of, "include": include}):
        assert placement_options(pools, occ, **kw) == brute_force_options(cluster, **kw), kw
    assert occ.listed() == cluster.placements
    for p in pools:
        for d in range(p.count + 3):
            assert occ.members(p.name, d) == fresh.members(p.name, d)
            assert occ.in_list_order(occ.members(p.name, d))


@pytest.mark.parametrize("seed", range(16))
def test_snapshots_of_a_log_sync_to_what_a_fresh_index_shows(seed):
    rng = np.random.default_rng(seed)
    variants = make_variants()
    start = random_cluster(rng, variants, max_count=20)
    pools = list(start.pools)
    book = _Book(list(start.placements), keep=int(rng.choice([2, 8, 4096])))  # a short log gets trimmed
    occ = Occupancy()
    for step in range(80):
        for _ in range(int(rng.integers(0, 3))):  # a few changes between two decisions, or none
            _step(rng, variants, pools, book, step)
        listed = book.snapshot()
        other = rng.random()
        if other < 0.1:  # the same list as a plain copy (e.g. a copy with leases added)
            listed = list(listed)
        elif other < 0.15:  # every object new (what the HTTP service sees)
            listed = [p.model_copy() for p in listed]
        jobs = [p.job_id for p in listed]
        exclude = jobs[int(rng.integers(len(jobs)))] if jobs and rng.random() < 0.4 else None
        occ.sync(listed, exclude=exclude)
        _same_view(occ, pools, list(listed), exclude, rng)


def test_a_snapshot_of_the_same_log_is_synced_from_its_changes(monkeypatch):
    variants = make_variants()
    rng = np.random.default_rng(3)
    start = random_cluster(rng, variants, max_count=20)
    book = _Book(list(start.placements), keep=4096)
    occ = Occupancy.of(book.snapshot())
    for step in range(20):
        _step(rng, variants, list(start.pools), book, step)
    monkeypatch.setattr(Occupancy, "_sync_appended", lambda *a: pytest.fail("compared the lists"))
    monkeypatch.setattr(Occupancy, "_rebuild", lambda *a: pytest.fail("regrouped the list"))
    listed = book.snapshot()
    occ.sync(listed)
    monkeypatch.undo()
    _same_view(occ, list(start.pools), list(listed), None, rng)


def test_a_snapshot_that_does_not_match_its_log_is_repaired_from_the_list():
    """A producer that changed its list without logging it (and logged another change): the counts disagree, the
    list itself wins."""
    variants = make_variants()
    rng = np.random.default_rng(5)
    start = random_cluster(rng, variants, max_count=20)
    book = _Book(list(start.placements), keep=4096)
    occ = Occupancy.of(book.snapshot())
    pools = list(start.pools)
    book.placements["unlogged"] = _placement(rng, variants, pools[0], "unlogged", device=0)
    book.place(_placement(rng, variants, pools[1], "logged", device=1))
    listed = book.snapshot()
    occ.sync(listed)
    _same_view(occ, pools, list(listed), None, rng)


def test_the_log_keeps_its_latest_changes():
    log = PlacementLog(keep=3)
    for k in range(10):
        log.join(k)
    assert log.version == 10
    assert log.between(7, 10) == [(7, True), (8, True), (9, True)]
    assert log.between(0, 10) is None and log.between(9, 11) is None and log.between(9, 8) is None
    s = log.snapshot([1, 2])
    assert s == [1, 2] and s.log is log and s.version == 10


def test_a_snapshot_is_a_plain_list_to_everything_else():
    rng = np.random.default_rng(0)
    start = random_cluster(rng, make_variants(), max_count=10)
    book = _Book(list(start.placements), keep=16)
    state = ClusterState.model_construct(pools=start.pools, placements=book.snapshot())
    assert state == start and state.model_dump() == start.model_dump()
    assert ClusterState.model_validate_json(state.model_dump_json()) == start
