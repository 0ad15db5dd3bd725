"""Placement options: interchangeable (empty) devices are one option, and the options read from the cluster's
occupancy are what a brute-force walk over every device gives."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.occupancy import Occupancy
from oltunes.tuner.decide.candidates import PlacementOption, memory_need_gb, placement_options
from oltunes.types import Candidate, ClusterState, Placement, Pool
from tests.tuner.variants import make_variants


def _used_gb(placements) -> float:
    """The memory the placements' jobs need (the plain sum, read per placement every time)."""
    return sum(memory_need_gb(p.candidate.variant, p.candidate.concurrency) for p in placements)


def _loads(placements, load_of) -> tuple[float, ...]:
    return () if load_of is None else tuple(load_of(p) for p in placements)


def brute_force_options(cluster: ClusterState, *, ignore_capacity=False, include=None, load_of=None):
    """The reference: look at every device of every pool."""
    out = []
    for pool in cluster.pools:
        cap, mem = pool.slots_per_device, pool.accelerator.memory_gb
        devices = [[p for p in cluster.placements if p.pool == pool.name and p.device == i] for i in range(pool.count)]
        keep = include[1] if include and include[0] == pool.name and 0 <= include[1] < pool.count else None
        pool_free = pool.count * cap - sum(len(d) for d in devices)
        free = [i for i, d in enumerate(devices) if len(d) < cap]
        if not free:
            if ignore_capacity:
                i = min(range(pool.count), key=lambda k: (len(devices[k]), k))
                out.append(PlacementOption(pool, i, tuple(devices[i]), mem - _used_gb(devices[i]), 0, 0,
                                           _loads(devices[i], load_of)))
            continue
        chosen = [i for i in free if not devices[i]][:1]
        shared = [i for i in free if devices[i]]
        if shared:
            chosen.append(max(shared, key=lambda k: (len(devices[k]), -k)))
        if keep is not None and keep in free and keep not in chosen:
            chosen.append(keep)
        out += [PlacementOption(pool, i, tuple(devices[i]), mem - _used_gb(devices[i]), cap - len(devices[i]) - 1,
                                pool_free - 1, _loads(devices[i], load_of)) for i in chosen]
    return out


def options_of(cluster: ClusterState, **kw):
    """The tuner's options from the cluster's occupancy."""
    return placement_options(Occupancy(cluster), **kw)


def random_cluster(rng: np.random.Generator, variants, *, max_count: int = 60) -> ClusterState:
    kinds = ["t4", "a100", "cpu", "l4"]
    pools = [Pool(name=f"{k}-{i}", accelerator=CATALOG[k], count=int(rng.integers(1, max_count)),
                  slots_per_device=int(rng.integers(1, 4))) for i, k in enumerate(kinds)]
    placements = []
    for pool in pools:
        # crowd a few devices (some full, some not, indices anywhere) so every branch is reached
        devices = list(rng.choice(pool.count, size=int(rng.integers(0, pool.count + 1)), replace=False))
        if rng.random() < 0.3:  # a stale placement naming a device the pool no longer has: ignored
            devices.append(pool.count + int(rng.integers(3)))
        for d in devices:
            for _ in range(int(rng.integers(1, pool.slots_per_device + 1))):
                v = variants[int(rng.integers(len(variants)))]
                placements.append(Placement(
                    job_id=f"j{len(placements)}", pool=pool.name, device=int(d), slo_ms=200.0,
                    arrival_rate_rps=float(rng.choice([0.0, 40.0])),
                    candidate=Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=v,
                                        batch_size=int(rng.choice([1, 4, 8])), concurrency=int(rng.integers(1, 3)))))
    return ClusterState(pools=pools, placements=placements)


@pytest.mark.parametrize("seed", range(40))
def test_pool_summary_matches_the_per_device_walk(seed):
    rng = np.random.default_rng(seed)
    cluster = random_cluster(rng, make_variants())
    pool = cluster.pools[int(rng.integers(len(cluster.pools)))]
    include = (pool.name, int(rng.integers(pool.count)))
    load_of = (lambda p: 0.5 if p.arrival_rate_rps else 1.0)
    for kw in ({}, {"include": include}, {"ignore_capacity": True}, {"load_of": load_of, "include": include}):
        assert options_of(cluster, **kw) == brute_force_options(cluster, **kw), kw


def test_a_thousand_empty_devices_are_one_option_at_the_lowest_index():
    v = make_variants()[0]
    pool = Pool(name="t4", accelerator=CATALOG["t4"], count=1000, slots_per_device=2)
    placed = [Placement(job_id=f"j{d}", pool="t4", device=d, slo_ms=100.0,
                        candidate=Candidate(pool="t4", accelerator="t4", variant=v, batch_size=1, concurrency=1))
              for d in (0, 1, 3, 500)]
    opts = options_of(ClusterState(pools=[pool], placements=placed))
    assert [(o.device, len(o.members)) for o in opts] == [(2, 0), (0, 1)]  # first empty; fullest (lowest index)
    assert opts[0].pool_free_slots_after == 2000 - 4 - 1


def _strip(d):
    x = d.model_dump(mode="json")
    for k in ("job_id", "decision_id"):
        x.pop(k)
    (x.get("group") or {}).pop("group_id", None)
    return x
