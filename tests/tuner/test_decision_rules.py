"""What a decision promises, checked from outside on random clusters and jobs: the chosen candidate meets the SLO
(pessimistically) whenever the decision says feasible, fits its device's memory and slots, keeps the co-runners
already on its device inside their SLOs, and, when nothing is feasible, is the least violating; the occupancy the
options come from reflects the placements."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.occupancy import Occupancy
from oltunes.tuner import Tuner
from oltunes.tuner.decide.candidates import co_runner_of, memory_need_gb
from oltunes.tuner.decide.corunners import LOAD_LEVELS, keeps_slo, load_level
from oltunes.types import Candidate, ClusterState, JobSpec, Placement, Pool, Variant
from tests.tuner.test_decision_caches import _measurement
from tests.tuner.test_placement_scale import random_cluster
from tests.tuner.variants import make_variants


def _jobs(rng: np.random.Generator) -> list[JobSpec]:
    out = []
    for i in range(12):
        streaming = rng.random() < 0.5
        out.append(JobSpec(job_id=f"new-{i}", family=str(rng.choice(["cnn", "vit"])),
                           kind="streaming" if streaming else "batch", slo_ms=float(rng.choice([60.0, 300.0, 2000.0])),
                           arrival_rate_rps=float(rng.choice([10.0, 80.0])) if streaming else 0.0, items=500,
                           accuracy_floor=float(rng.choice([0.0, 0.5]))))
    return out


def _device_members(cluster: ClusterState, pool: str, device: int, exclude: str) -> list[Placement]:
    return [p for p in cluster.placements if p.pool == pool and p.device == device and p.job_id != exclude]


def _crowded_cluster(rng: np.random.Generator, variants) -> ClusterState:
    """Every device runs one job (SLOs from tight to loose) and has one free slot: a job can only join one."""
    pools = [Pool(name=k, accelerator=CATALOG[k], count=3, slots_per_device=2) for k in ("t4", "a100", "l4")]
    placements = [Placement(job_id=f"{p.name}-{d}", pool=p.name, device=d, slo_ms=float(rng.choice([100.0, 1e3, 1e5])),
                            arrival_rate_rps=float(rng.choice([0.0, 40.0])),
                            candidate=Candidate(pool=p.name, accelerator=p.accelerator.name,
                                                variant=variants[int(rng.integers(len(variants)))],
                                                batch_size=int(rng.choice([1, 4])), concurrency=1))
                  for p in pools for d in range(p.count)]
    return ClusterState(pools=pools, placements=placements)


@pytest.mark.parametrize("crowded", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_a_feasible_decision_meets_slo_memory_slots_and_the_co_runners_slos(seed, crowded):
    rng = np.random.default_rng(seed)
    variants = make_variants()
    tuner = Tuner(variants, seed=seed, explore_rate=0.0)
    cluster = _crowded_cluster(rng, variants) if crowded else random_cluster(rng, variants, max_count=20)
    for i in range(30):  # the model path, not only the prior
        tuner.observe(_measurement(rng, cluster, variants, i))
    n_feasible = n_shared = 0
    for job in _jobs(rng):
        d = tuner.decide(job, cluster)
        c = d.candidate
        pool = cluster.pool(c.pool)
        device = d.group.device if d.group is not None else Occupancy(cluster).empty_device(c.pool)
        members = _device_members(cluster, c.pool, device, job.job_id)
        assert [m.job_id for m in members] == [r.job_id for r in c.co_runners]
        if not d.feasible:
            continue
        n_feasible += 1
        predicted = d.explanation.predicted
        if job.kind == "batch":  # (a stream's SLO is per request: batch latency + waits, checked in the estimate)
            assert predicted.latency_p99_ms + predicted.margin_ms <= job.slo_ms * (1 + 1e-9)
        assert c.variant.accuracy >= job.accuracy_floor
        assert len(members) < pool.slots_per_device
        used = sum(memory_need_gb(m.candidate.variant, m.candidate.concurrency) for m in members)
        assert memory_need_gb(c.variant, c.concurrency) <= pool.accelerator.memory_gb - used + 1e-9
        for m in members:  # each co-runner keeps its SLO with the newcomer beside it
            n_shared += 1
            others = [co_runner_of(o, tuner.estimator.load_of(o)) for o in members if o is not m]
            newcomer = co_runner_of(Placement(job_id=job.job_id, pool=c.pool, device=device, candidate=c,
                                              slo_ms=job.slo_ms, arrival_rate_rps=job.arrival_rate_rps))
            busy = job.arrival_rate_rps / predicted.throughput_items_per_s if job.kind == "streaming" else 1.0
            level = float(LOAD_LEVELS[load_level(busy)])  # the newcomer's load, as the check rounds it up
            _, pessimistic = tuner._member_latency(c.pool, m, [*others, newcomer.model_copy(update={"load": level})])
            assert keeps_slo(m, pessimistic * (1 - 1e-9))
    assert n_feasible >= 2
    assert n_shared > 0 or not crowded


def _one_device_pools(member_slo: float) -> tuple[ClusterState, Placement]:
    v = make_variants()[0]
    shared = Pool(name="shared", accelerator=CATALOG["a100"], count=1, slots_per_device=2)
    spare = Pool(name="spare", accelerator=CATALOG["t4"], count=1, slots_per_device=2)
    member = Placement(job_id="member", pool="shared", device=0, slo_ms=member_slo,
                       candidate=Candidate(pool="shared", accelerator="a100", variant=v, batch_size=4, concurrency=1))
    return ClusterState(pools=[shared, spare], placements=[member]), member


def test_a_job_does_not_join_a_device_whose_co_runner_would_miss_its_slo():
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.0)
    job = JobSpec(family=make_variants()[0].family, slo_ms=1e5, items=100)
    _, member = _one_device_pools(1e5)
    _, alone = tuner._member_latency("shared", member, ())
    tight, _ = _one_device_pools(alone * 1.0001)  # any co-runner slows it past its SLO
    loose, _ = _one_device_pools(1e5)
    for cluster, may_join in ((tight, False), (loose, True)):
        est, verdict, _, _ = tuner._evaluator.evaluate(job, cluster, None)
        shared = [p for p, o in enumerate(est.options) if o.members]
        assert shared
        co_ok = np.broadcast_to(verdict.masks["co-runners"], est.shape)
        assert co_ok[shared].any() == may_join and co_ok[shared].all() == may_join
        d = tuner.decide(job, cluster)
        assert d.feasible
        if not may_join:
            assert d.candidate.co_runners == () and d.candidate.pool == "spare"


def test_a_job_never_gets_a_candidate_that_does_not_fit_its_device_memory():
    big = Variant(family="llm", name="llm-l", size="l", accuracy=0.9, params=3_000_000_000)  # 24 GB at fp32, x2
    small = Variant(family="llm", name="llm-s", size="s", accuracy=0.5, params=500_000_000)
    tuner = Tuner([big, small], seed=0, explore_rate=0.0)
    pools = [Pool(name="t4", accelerator=CATALOG["t4"], count=2)]  # 16 GB: the large variant never fits
    d = tuner.decide(JobSpec(family="llm", slo_ms=1e6, items=10), ClusterState(pools=pools))
    assert d.candidate.variant.name == "llm-s"
    assert memory_need_gb(small, d.candidate.concurrency) <= CATALOG["t4"].memory_gb
    # asked for the large one's accuracy: nothing fits, and the decision says so
    d = tuner.decide(JobSpec(family="llm", slo_ms=1e6, items=10, accuracy_floor=0.8), ClusterState(pools=pools))
    assert not d.feasible and "infeasible" in d.explanation.note


def test_nothing_feasible_falls_back_to_the_least_violating_candidate():
    variants = make_variants()
    tuner = Tuner(variants, seed=0, explore_rate=0.0)
    cluster = ClusterState(pools=[Pool(name="t4", accelerator=CATALOG["t4"], count=2),
                                  Pool(name="cpu", accelerator=CATALOG["cpu"], count=2)])
    job = JobSpec(family="cnn", slo_ms=1e-3, items=100)  # no candidate can meet a microsecond SLO
    d = tuner.decide(job, cluster)
    assert not d.feasible
    est, verdict, _, obj = tuner._evaluator.evaluate(job, cluster, None)
    fits = np.broadcast_to(verdict.masks["memory"], est.shape)
    fastest = est.req_lat[fits].min()  # on empty devices the violation is the latency's overshoot alone
    chosen = d.candidate
    idx = next(i for i in np.argwhere(fits)
               if est.candidate(tuple(int(x) for x in i)).key == chosen.key)
    assert est.req_lat[tuple(idx)] == fastest
    assert d.explanation.predicted.latency_p99_ms > job.slo_ms


def test_a_re_tuned_infeasible_job_stays_unless_moving_is_clearly_less_bad():
    variants = make_variants()
    tuner = Tuner(variants, seed=0, explore_rate=0.0)
    pools = [Pool(name="t4", accelerator=CATALOG["t4"], count=2), Pool(name="cpu", accelerator=CATALOG["cpu"], count=2)]
    job = JobSpec(job_id="run", family="cnn", slo_ms=1e-3, items=100)
    first = tuner.decide(job, ClusterState(pools=pools))
    current = Placement(job_id="run", pool=first.candidate.pool, device=0, candidate=first.candidate, slo_ms=1e-3)
    again = tuner.decide(job, ClusterState(pools=pools, placements=[current]), current=current)
    assert again.candidate.key == first.candidate.key and again.group is not None and again.group.device == 0


def test_occupancy_reflects_the_placements():
    v = make_variants()[0]
    pool = Pool(name="t4", accelerator=CATALOG["t4"], count=4, slots_per_device=2)

    def placed(job_id: str, device: int) -> Placement:
        return Placement(job_id=job_id, pool="t4", device=device, slo_ms=100.0,
                         candidate=Candidate(pool="t4", accelerator="t4", variant=v, batch_size=1))

    stale = Placement(job_id="gone", pool="old", device=0, slo_ms=1.0,
                      candidate=Candidate(pool="old", accelerator="t4", variant=v, batch_size=1))
    cluster = ClusterState(pools=[pool], placements=[placed("a", 0), placed("b", 2), placed("c", 0), stale,
                                                     placed("d", 9)])  # (device 9: not in the pool, ignored)
    occ = Occupancy(cluster)
    assert occ.occupancy("t4").tolist() == [2, 0, 1, 0]
    assert [m.job_id for m in occ.members("t4", 0)] == ["a", "c"]  # in the cluster's order
    assert occ.free_slots("t4") == 8 - 3 and occ.empty_device("t4") == 1
    assert occ.most_loaded_device("t4") == 2  # device 0 is full
    assert occ.least_loaded_device("t4") == 1
    excluded = Occupancy(cluster, exclude="a")
    assert excluded.occupancy("t4").tolist() == [1, 0, 1, 0] and excluded.most_loaded_device("t4") == 0
    full = Occupancy(ClusterState(pools=[pool.model_copy(update={"count": 1})], placements=[placed("a", 0),
                                                                                           placed("c", 0)]))
    assert full.empty_device("t4") is None and full.least_loaded_device("t4") is None
    assert full.least_loaded_device("t4", with_free_slot=False) == 0
