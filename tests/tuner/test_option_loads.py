"""Placement options keep their members' loads while nothing ``load_of`` reads moved (``loads_version``): after
any sequence of cluster changes and measurements (which move measured loads), the kept options equal options
built from a fresh index with every load read again."""

from __future__ import annotations

from operator import is_

import numpy as np
import pytest

from oltunes.tuner import Tuner
from oltunes.tuner.candidates import placement_options
from oltunes.tuner.cluster_options import ClusterOptions
from oltunes.tuner.occupancy import Occupancy
from oltunes.types import Measurement
from tests.tuner.test_member_rows import _moved
from tests.tuner.test_placement_scale import random_cluster
from tests.tuner.variants import make_variants


def _measured(rng, cluster, k: int) -> Measurement:
    """A streaming measurement of one placed job with a device utilisation (its measured load moves)."""
    p = cluster.placements[int(rng.integers(len(cluster.placements)))]
    p99 = float(rng.uniform(5.0, 300.0))
    return Measurement(measurement_id=f"m{k}", job_id=p.job_id, candidate=p.candidate, items=100, wall_s=1.0,
                       latency_p50_ms=p99 / 2, latency_p95_ms=p99 * 0.9, latency_p99_ms=p99,
                       throughput_items_per_s=100.0, energy_j_per_item=0.5, energy_source="simulated",
                       kind="streaming", arrival_rate_rps=40.0, gpu_util=float(rng.uniform(0.05, 1.0)))


@pytest.mark.parametrize("seed", range(8))
def test_kept_option_loads_equal_loads_read_again(seed):
    rng = np.random.default_rng(seed)
    variants = make_variants()
    cluster = random_cluster(rng, variants, max_count=4)
    while not any(m.arrival_rate_rps for o in placement_options(cluster.pools, Occupancy.of(cluster.placements))
                  for m in o.members):
        cluster = random_cluster(rng, variants, max_count=4)  # drawn until a streaming job shares a device
    tuner = Tuner(variants, seed=seed)
    kept = ClusterOptions(tuner.estimator, tuner.catalogue)
    n_loaded = 0
    for step in range(30):
        cluster = _moved(rng, cluster)
        if step % 3 == 2 and cluster.placements:
            tuner.observe(_measured(rng, cluster, step))
        got, _ = kept.of(cluster, None, None)
        want = placement_options(cluster.pools, Occupancy.of(cluster.placements), load_of=tuner.estimator.load_of)
        assert got == want, step
        n_loaded += sum(ld != 1.0 for o in got for ld in o.loads)
    assert n_loaded  # measured loads other than the default reached the options


def test_a_placement_is_read_once_per_loads_version():
    """Options built again for a pool that changed read the loads of the placements already read at this
    ``loads_version`` from the index's table, and read them again once the version moves."""
    from oltunes.inventory import CATALOG
    from oltunes.types import Candidate, Placement, Pool

    variants = make_variants()
    pool = Pool(name="t4", accelerator=CATALOG["t4"], count=8, slots_per_device=4)

    def placed(job_id: str, device: int) -> Placement:
        c = Candidate(pool="t4", accelerator="t4", variant=variants[0], batch_size=4, concurrency=1)
        return Placement(job_id=job_id, pool="t4", device=device, candidate=c, slo_ms=100.0, arrival_rate_rps=10.0)

    placements = [placed("a", 0), placed("b", 0)]
    read: list[str] = []

    def load_of(p: Placement) -> float:
        read.append(p.job_id)
        return 0.5

    occ = Occupancy.of(placements)
    first = placement_options([pool], occ, load_of=load_of, loads_version=1)
    assert sorted(read) == ["a", "b"]
    placements = [*placements, placed("c", 0)]  # the pool changes: its options are built again
    occ.sync(placements)
    again = placement_options([pool], occ, load_of=load_of, loads_version=1)
    assert sorted(read) == ["a", "b", "c"]  # a and b not read again
    assert [o.loads for o in first if o.device == 0] == [(0.5, 0.5)]
    assert [o.loads for o in again if o.device == 0] == [(0.5, 0.5, 0.5)]
    placement_options([pool], occ, load_of=load_of, loads_version=2)
    assert sorted(read[3:]) == ["a", "b", "c"]  # a new version: every member read again


def test_an_options_co_runners_are_made_once_per_placement_and_load():
    """Options built again for the same placements hand out the same co-runner objects (frozen), equal to fresh
    ones; a member whose load moved gets a new one."""
    from oltunes.tuner.candidates import co_runner_of

    variants = make_variants()
    rng = np.random.default_rng(4)
    cluster = random_cluster(rng, variants, max_count=4)
    while not any(o.members for o in placement_options(cluster.pools, Occupancy.of(cluster.placements))):
        cluster = random_cluster(rng, variants, max_count=4)
    loads = {p.job_id: 0.5 for p in cluster.placements}

    def load_of(p):
        return loads[p.job_id]

    occ = Occupancy.of(cluster.placements)
    first = placement_options(cluster.pools, occ, load_of=load_of, loads_version=1)
    shared = [o for o in first if o.members]
    made = [o.co_runners for o in shared]
    assert made == [tuple(co_runner_of(m, 0.5) for m in o.members) for o in shared]
    occ.memo = {k: v for k, v in occ.memo.items() if not isinstance(k, tuple)}  # options dropped, table kept
    again = [o for o in placement_options(cluster.pools, occ, load_of=load_of, loads_version=1) if o.members]
    assert all(a is not b and all(map(is_, a.co_runners, b.co_runners)) for a, b in zip(again, shared, strict=True))
    loads[shared[0].members[0].job_id] = 0.75
    moved = [o for o in placement_options(cluster.pools, occ, load_of=load_of, loads_version=2) if o.members]
    assert moved[0].co_runners[0] == co_runner_of(shared[0].members[0], 0.75)
