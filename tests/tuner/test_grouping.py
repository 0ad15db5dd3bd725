"""Co-running groups: complementary jobs share a device, every member stays inside its SLO."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.tuner.decide.candidates import co_runner_of
from oltunes.types import Candidate, ClusterState, JobSpec, Measurement, Placement, Pool, Variant

VARIANTS = [
    Variant(family="cnn", name="cnn-m", size="m", accuracy=0.76, params=25_000_000),   # compute-bound
    Variant(family="bert", name="bert-b", size="b", accuracy=0.90, params=110_000_000),  # memory-bound
]
POOL = Pool(name="t4-pool", accelerator=CATALOG["t4"], count=4, slots_per_device=2)
BASE_MS = {"cnn": 4.0, "bert": 8.0}
# Slowdown of a job (row) sharing with a co-runner (column): same kind interferes, the mixed pair barely does.
SLOWDOWN = {("cnn", "cnn"): 1.8, ("bert", "bert"): 1.7, ("cnn", "bert"): 1.1, ("bert", "cnn"): 1.1}


def true_latency(c: Candidate) -> float:
    lat = BASE_MS[c.variant.family]
    for co in c.co_runners:
        lat *= SLOWDOWN[(c.variant.family, co.family)]
    return lat


def trained_tuner() -> Tuner:
    tuner = Tuner(VARIANTS, seed=0, explore_rate=0.0)
    rng = np.random.default_rng(0)
    i = 0
    for _ in range(150):
        for v in VARIANTS:
            for co in ([], ["cnn"], ["bert"]):
                cos = tuple(co_runner_of(Placement(job_id=f"o{i}", pool=POOL.name, device=0, slo_ms=100,
                                                   candidate=Candidate(pool=POOL.name, accelerator="t4",
                                                                       variant=next(x for x in VARIANTS if x.family == f),
                                                                       batch_size=1)))
                            for f in co)
                c = Candidate(pool=POOL.name, accelerator="t4", variant=v, batch_size=1, co_runners=cos)
                lat = true_latency(c) * math.exp(0.02 * rng.normal())
                tuner.observe(Measurement(measurement_id=f"m{i}", job_id="train", candidate=c, items=10, wall_s=1,
                                          latency_p50_ms=lat, latency_p95_ms=lat, latency_p99_ms=lat,
                                          throughput_items_per_s=1000 / lat, energy_j_per_item=0.01 * lat,
                                          energy_source="simulated"))
                i += 1
    return tuner


@pytest.fixture(scope="module")
def tuner() -> Tuner:
    return trained_tuner()


def placement(job_id: str, family: str, slo_ms: float, device: int = 0) -> Placement:
    v = next(x for x in VARIANTS if x.family == family)
    return Placement(job_id=job_id, pool=POOL.name, device=device, slo_ms=slo_ms,
                     candidate=Candidate(pool=POOL.name, accelerator="t4", variant=v, batch_size=1))


def test_pairs_complementary_jobs_and_keeps_every_slo(tuner):
    jobs = [placement("c1", "cnn", 12, 0), placement("c2", "cnn", 12, 1), placement("b1", "bert", 15, 2),
            placement("b2", "bert", 15, 3)]
    groups = tuner.groups(ClusterState(pools=[POOL], placements=jobs), POOL.name)
    fam = {j.job_id: j.candidate.variant.family for j in jobs}
    assert sorted(len(g.members) for g in groups) == [2, 2]
    for g in groups:
        assert {fam[m] for m in g.members} == {"cnn", "bert"}  # complementary pairs, never two of a kind
        assert len({g.device for g in groups}) == len(groups)
        for m in g.members:  # truth check: each member inside its SLO with its group
            me = next(j for j in jobs if j.job_id == m)
            others = [next(j for j in jobs if j.job_id == o) for o in g.members if o != m]
            c = me.candidate.model_copy(update={"co_runners": tuple(co_runner_of(o) for o in others)})
            assert true_latency(c) <= me.slo_ms
            assert g.predicted_slowdown[m] == pytest.approx(SLOWDOWN[(fam[m], fam[others[0].job_id])], rel=0.15)


def test_tight_slos_are_not_grouped(tuner):
    jobs = [placement("c1", "cnn", 4.5, 0), placement("b1", "bert", 8.5, 1)]  # 10% slowdown breaks both
    groups = tuner.groups(ClusterState(pools=[POOL], placements=jobs), POOL.name)
    assert [len(g.members) for g in groups] == [1, 1]


def test_recommend_sets_group_and_protects_co_runners(tuner):
    full = Pool(name="t4-pool", accelerator=CATALOG["t4"], count=1, slots_per_device=2)
    # A bert job with room in its SLO: a cnn newcomer may join it, and the decision names the group.
    roomy = ClusterState(pools=[full], placements=[placement("b1", "bert", 30)])
    d = tuner.decide(JobSpec(job_id="new", family="cnn", slo_ms=30), roomy)
    assert d.feasible and d.group is not None
    assert set(d.group.members) == {"b1", "new"} and d.group.device == 0
    assert set(d.group.predicted_slowdown) == {"b1", "new"}
    assert d.candidate.co_runners and d.candidate.co_runners[0].job_id == "b1"
    # The same device, but the bert job has no room left: joining would break its SLO -> infeasible.
    tight = ClusterState(pools=[full], placements=[placement("b1", "bert", 8.4)])
    d = tuner.decide(JobSpec(job_id="new", family="cnn", slo_ms=30), tight)
    assert not d.feasible and "co-runners' SLOs" in d.explanation.note


def test_lightly_loaded_co_runners_may_share_where_flat_out_ones_may_not():
    """Interference scales with how busy a co-runner keeps the device: two streams at a fraction of the
    device share it; the same pair assumed flat out (load 1, the default) does not fit the SLO."""
    from oltunes.tuner.decide.grouping import plan_groups

    def latency(pool, member, co):  # 10 ms alone, +100% per fully busy co-runner
        lat = 10.0 * (1.0 + sum(c.load for c in co))
        return lat, lat * 1.1

    cands = [Candidate(pool=POOL.name, accelerator="t4", variant=v, batch_size=1) for v in VARIANTS]
    jobs = [Placement(job_id=f"j{i}", pool=POOL.name, device=i, candidate=c, slo_ms=15.0, arrival_rate_rps=5.0)
            for i, c in enumerate(cands)]
    flat_out = plan_groups(POOL, jobs, latency)
    assert sorted(len(g.members) for g in flat_out) == [1, 1]  # 10 x 2 x 1.1 = 22 ms > 15 ms
    light = plan_groups(POOL, jobs, latency, lambda p: 0.2)
    assert [len(g.members) for g in light] == [2]  # 10 x 1.2 x 1.1 = 13.2 ms <= 15 ms
