"""The incrementally synced occupancy index gives exactly the options of a fresh per-device walk, whatever changed
between two decisions (placements added, removed, moved, reordered, listed twice, pools resized, a job excluded)."""

from __future__ import annotations

from operator import is_

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.tuner.candidates import placement_options
from oltunes.tuner.occupancy import Occupancy
from oltunes.types import Candidate, ClusterState, Placement, Pool

from tests.tuner.test_placement_scale import brute_force_options, random_cluster
from tests.tuner.variants import make_variants


def _placement(rng, variants, pool: Pool, job_id: str, device: int | None = None) -> Placement:
    v = variants[int(rng.integers(len(variants)))]
    return Placement(job_id=job_id, pool=pool.name, slo_ms=200.0, arrival_rate_rps=float(rng.choice([0.0, 40.0])),
                     device=int(rng.integers(pool.count + 2)) if device is None else device,  # may be stale
                     candidate=Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=v,
                                         batch_size=int(rng.choice([1, 4, 8])), concurrency=int(rng.integers(1, 3))))


def _mutate(rng, variants, pools: list[Pool], placements: list[Placement], step: int) -> tuple[list, list]:
    placements = list(placements)
    kind = rng.choice(["add", "remove", "move", "requeue", "reorder", "resize", "twice", "fresh"])
    if kind == "add" or not placements:
        for k in range(int(rng.integers(1, 4))):
            placements.insert(int(rng.integers(len(placements) + 1)),
                              _placement(rng, variants, pools[int(rng.integers(len(pools)))], f"s{step}-{k}"))
    elif kind == "remove":
        del placements[int(rng.integers(len(placements)))]
    elif kind == "move":  # a re-placed job: a new object with the same id on another device
        i = int(rng.integers(len(placements)))
        pool = next(p for p in pools if p.name == placements[i].pool)
        placements[i] = placements[i].model_copy(update={"device": int(rng.integers(pool.count))})
    elif kind == "requeue":  # what a simulator or a lease book does: a few jobs out, re-placed at the end
        for _ in range(int(rng.integers(1, 4))):
            p = placements.pop(int(rng.integers(len(placements))))
            if rng.random() < 0.7 and placements:
                pool = next(x for x in pools if x.name == p.pool)
                placements.append(p.model_copy(update={"device": int(rng.integers(pool.count))}))
            if not placements:
                break
    elif kind == "reorder":
        rng.shuffle(placements)
    elif kind == "resize":
        i = int(rng.integers(len(pools)))
        pools = [*pools[:i], pools[i].model_copy(update={"count": int(rng.integers(1, 40))}), *pools[i + 1:]]
    elif kind == "twice":  # the same object listed twice counts twice
        placements.append(placements[int(rng.integers(len(placements)))])
    else:  # every object new (what the HTTP service sees)
        placements = [p.model_copy() for p in placements]
    return pools, placements


@pytest.mark.parametrize("seed", range(24))
def test_a_synced_index_gives_the_options_of_a_fresh_walk_after_any_change(seed):
    rng = np.random.default_rng(seed)
    variants = make_variants()
    start = random_cluster(rng, variants, max_count=30)
    pools, placements = list(start.pools), list(start.placements)
    occ = Occupancy()
    for step in range(60):
        pools, placements = _mutate(rng, variants, pools, placements, step)
        exclude = placements[int(rng.integers(len(placements)))].job_id if placements and rng.random() < 0.4 else None
        occ.sync(placements, exclude=exclude)
        cluster = ClusterState.model_construct(pools=pools,
                                               placements=[p for p in placements if p.job_id != exclude])
        pool = pools[int(rng.integers(len(pools)))]
        include = (pool.name, int(rng.integers(pool.count)))
        load_of = (lambda p: 0.5 if p.arrival_rate_rps else 1.0)
        for kw in ({}, {"include": include}, {"ignore_capacity": True}, {"load_of": load_of, "include": include}):
            assert placement_options(pools, occ, **kw) == brute_force_options(cluster, **kw), (step, kw)
        assert occ.listed() == cluster.placements


def test_sync_changes_only_what_differs():
    """A re-synced cluster with one job moved touches that job only (the index keeps the other objects)."""
    variants = make_variants()
    pool = Pool(name="t4", accelerator=CATALOG["t4"], count=100, slots_per_device=2)
    rng = np.random.default_rng(0)
    placements = [_placement(rng, variants, pool, f"j{d}", device=d) for d in range(50)]
    occ = Occupancy.of(placements)
    assert occ.first_empty("t4", 100) == 50 and occ.used("t4", 100) == 50
    moved = placements[7].model_copy(update={"device": 3})
    occ.sync([*placements[:7], moved, *placements[8:]])
    assert occ.members("t4", 3) == (placements[3], moved)
    assert occ.first_empty("t4", 100) == 7 and occ.fullest_free("t4", 100, 2) == 0  # device 3 is full
    assert occ.fullest_free("t4", 100, 3) == 3
    occ.sync(placements, exclude="j3")  # the re-tuned job's own slot is free again
    assert occ.members("t4", 3) == () and occ.first_empty("t4", 100) == 3
    occ.sync(placements)
    assert occ.members("t4", 3) == (placements[3],)


def test_a_list_changed_in_place_is_seen():
    """The caller may mutate the very list it passed last time: the index compares objects, not the list."""
    variants = make_variants()
    pool = Pool(name="t4", accelerator=CATALOG["t4"], count=10, slots_per_device=2)
    rng = np.random.default_rng(1)
    placements = [_placement(rng, variants, pool, f"j{d}", device=d) for d in range(3)]
    occ = Occupancy.of(placements)
    placements.append(_placement(rng, variants, pool, "j9", device=0))
    occ.sync(placements)
    assert occ.used("t4", 10) == 4 and occ.fullest_free("t4", 10, 3) == 0
    placements[0] = placements[0].model_copy(update={"device": 5})
    occ.sync(placements)
    assert occ.members("t4", 0) == (placements[3],) and occ.members("t4", 5) == (placements[0],)
    placements.reverse()  # same objects, another order: members follow the list
    occ.sync(placements)
    assert occ.listed() == placements


def test_options_kept_without_an_order_check_until_the_list_may_have_reordered(monkeypatch):
    """Appending and removing placements keep the others' order, so a pool that did not change keeps its options
    without checking its members' order; a list that reorders them (same objects) has them checked, and the
    options follow the new order."""
    variants = make_variants()
    a = Pool(name="a", accelerator=CATALOG["t4"], count=4, slots_per_device=3)
    b = Pool(name="b", accelerator=CATALOG["t4"], count=4, slots_per_device=3)
    rng = np.random.default_rng(2)
    shared = [_placement(rng, variants, a, f"a{k}", device=0) for k in range(2)]
    placements = [*shared, _placement(rng, variants, b, "b0", device=0)]
    occ = Occupancy.of(placements)
    before = placement_options([a, b], occ)
    checks = []
    original = Occupancy.in_list_order
    monkeypatch.setattr(Occupancy, "in_list_order", lambda self, ms: checks.append(ms) or original(self, ms))
    placements = [*placements, _placement(rng, variants, b, "b1", device=0)]  # pool b changes, at the list's end
    occ.sync(placements)
    after = placement_options([a, b], occ)
    in_a = [o for o in before if o.pool is a]
    assert [o for o in after if o.pool is a] == in_a and all(map(is_, in_a, after)) and not checks  # kept, no walk
    placements = [placements[1], placements[0], *placements[2:]]  # the same objects, pool a's members swapped
    occ.sync(placements)
    swapped = placement_options([a, b], occ)
    assert checks and next(o for o in swapped if o.pool is a and o.device == 0).members == (shared[1], shared[0])
    assert swapped == brute_force_options(ClusterState.model_construct(pools=[a, b], placements=placements))
