"""Tuner: feasibility, objectives, infeasible answers, capacity, exactly-once, learning in a closed loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oltunes.errors import ConfigError
from oltunes.inventory import CATALOG
from oltunes.tuner import Prior, Tuner
from oltunes.tuner.decide.candidates import fill_wait_ms, memory_need_gb, queue_wait_ms
from oltunes.tuner.decide.objectives import Objective
from oltunes.tuner.decide.selection import TYPICAL_ERROR_OF_MARGIN
from oltunes.types import Candidate, ClusterState, JobSpec, Measurement, Placement, Pool, Variant

SIZES = {"s": (0.70, 5_000_000), "m": (0.76, 25_000_000), "l": (0.80, 60_000_000)}


def make_variants() -> list[Variant]:
    out = []
    for size, (acc, params) in SIZES.items():
        for prec, drop in (("fp32", 0.0), ("int8", 0.02)):
            out.append(Variant(family="cnn", name=f"cnn-{size}-{prec}", size=size, precision=prec,
                               accuracy=acc - drop, params=params))
    return out


def make_cluster(placements=()) -> ClusterState:
    return ClusterState(pools=[
        Pool(name="cpu-pool", accelerator=CATALOG["cpu"], count=1, slots_per_device=2),
        Pool(name="t4-pool", accelerator=CATALOG["t4"], count=2, slots_per_device=2),
        Pool(name="a100-pool", accelerator=CATALOG["a100"], count=1, slots_per_device=3),
    ], placements=list(placements))


def truth(c: Candidate) -> tuple[float, float, float]:
    """A made-up 'real' performance model, deliberately different from the heuristic prior."""
    speed = {"cpu": 0.15, "t4": 6.0, "a100": 12.0}[c.accelerator]
    gflop = 2e-7 * c.variant.params * (0.6 if c.variant.precision == "int8" else 1.0)
    lat = (0.5 + gflop * c.batch_size / speed) * (1 + 0.3 * (c.concurrency - 1)) * (1 + 0.4 * len(c.co_runners))
    thr = 1000.0 * c.batch_size * c.concurrency / lat
    energy = CATALOG[c.accelerator].max_w * 0.6 * lat / 1000.0 / (c.batch_size * c.concurrency)
    return lat, energy, thr


def measure(job: JobSpec, c: Candidate, rng: np.random.Generator, i: int) -> Measurement:
    lat, energy, thr = truth(c)
    noise = math.exp(0.03 * rng.normal())
    return Measurement(measurement_id=f"{job.job_id}-{i}", job_id=job.job_id, kind=job.kind,
                       arrival_rate_rps=job.arrival_rate_rps, candidate=c, items=100, wall_s=1.0,
                       latency_p50_ms=lat * noise * 0.8, latency_p95_ms=lat * noise * 0.95, latency_p99_ms=lat * noise,
                       throughput_items_per_s=thr / noise, energy_j_per_item=energy * noise, energy_source="simulated")


@pytest.fixture
def tuner() -> Tuner:
    return Tuner(make_variants(), seed=0, explore_rate=0.0)


def test_decision_meets_slo_and_accuracy_with_explanation(tuner):
    job = JobSpec(family="cnn", slo_ms=50, accuracy_floor=0.75, items=1000)
    d = tuner.decide(job, make_cluster())
    assert d.feasible and d.job_id == job.job_id
    assert d.variant.accuracy >= 0.75
    p = d.explanation.predicted
    assert p.latency_p99_ms + p.margin_ms <= 50
    assert p.margin_ms > 0
    assert 0 < d.explanation.n_feasible <= d.explanation.n_candidates
    reasons = [a.reason for a in d.explanation.runner_ups]
    assert reasons and all(reasons)
    assert any("accuracy floor" in r for r in reasons)  # the s variants lost on accuracy


def _best_by(tuner, job, cluster, key):
    """Brute force over the same candidates with predict(): the feasible minimum of `key`."""
    best = math.inf
    for pool in cluster.pools:
        for v in tuner.variants:
            if v.accuracy < job.accuracy_floor:
                continue
            for b in tuner.batch_sizes:
                for c in tuner.concurrencies:
                    if memory_need_gb(v, c) > pool.accelerator.memory_gb:
                        continue
                    cand = Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=v, batch_size=b,
                                     concurrency=c)
                    (p,) = tuner.predict(job, [cand])
                    if p.latency_p99_ms + p.margin_ms <= job.slo_ms:
                        best = min(best, key(p, pool))
    return best


@pytest.mark.parametrize("objective", ["energy", "completion_time", "cost"])
def test_objective_is_minimised_among_feasible(tuner, objective):
    cluster = make_cluster()
    job = JobSpec(family="cnn", slo_ms=80, accuracy_floor=0.7, items=5000, objective=objective)
    key = {
        "energy": lambda p, pool: p.energy_j_per_item,
        "completion_time": lambda p, pool: job.items / p.throughput_items_per_s,
        "cost": lambda p, pool: pool.accelerator.cost_per_hour / 3600 / p.throughput_items_per_s,
    }[objective]
    d = tuner.decide(job, cluster)
    (pred,) = tuner.predict(job, [d.candidate])
    chosen = key(pred, cluster.pool(d.pool))
    # near-equal: within near_equal, or within the estimate's typical error of the objective where that is wider
    target = Objective.lookup(objective).margin_target
    band = max([tuner.near_equal] + [math.expm1(TYPICAL_ERROR_OF_MARGIN * tuner.estimator.margins(
        p.accelerator.name, "cnn")[target]) for p in cluster.pools])
    assert band < 0.5  # the band is the estimate's error, not "anything goes"
    assert chosen <= _best_by(tuner, job, cluster, key) * (1 + band) + 1e-12


def test_decision_prediction_equals_predict_on_same_candidate(tuner):
    job = JobSpec(family="cnn", slo_ms=40, accuracy_floor=0.7, items=100, kind="streaming", arrival_rate_rps=50)
    rng = np.random.default_rng(0)
    for i, pool in enumerate(make_cluster().pools):  # learn something first so the FM part is non-trivial
        for k, v in enumerate(tuner.variants):
            tuner.observe(measure(job, Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=v,
                                                 batch_size=4, concurrency=2), rng, i * 100 + k))
    d = tuner.decide(job, make_cluster())
    (p,) = tuner.predict(job, [d.candidate])
    for a, b in ((p.latency_p99_ms, d.explanation.predicted.latency_p99_ms),
                 (p.energy_j_per_item, d.explanation.predicted.energy_j_per_item),
                 (p.throughput_items_per_s, d.explanation.predicted.throughput_items_per_s),
                 (p.margin_ms, d.explanation.predicted.margin_ms)):
        assert a == pytest.approx(b, rel=1e-9)


def test_infeasible_slo_is_an_answer_naming_the_constraint(tuner):
    d = tuner.decide(JobSpec(family="cnn", slo_ms=0.01, accuracy_floor=0.7), make_cluster())
    assert not d.feasible and d.explanation.n_feasible == 0
    assert "p99 latency SLO" in d.explanation.note
    assert d.candidate.variant.accuracy >= 0.7  # the best available still respects what it can


def test_infeasible_accuracy_floor(tuner):
    d = tuner.decide(JobSpec(family="cnn", slo_ms=1000, accuracy_floor=0.95), make_cluster())
    assert not d.feasible
    assert "accuracy floor" in d.explanation.note


def test_streaming_throughput_constraint(tuner):
    ok = tuner.decide(JobSpec(family="cnn", kind="streaming", slo_ms=200, arrival_rate_rps=100), make_cluster())
    assert ok.feasible
    p = ok.explanation.predicted
    m_thr = tuner.estimator.margins(ok.candidate.accelerator, "cnn")[2]
    assert p.throughput_items_per_s * math.exp(-m_thr) >= 100 * tuner.throughput_headroom
    # batch-fill wait (bounded by the dynamic batcher's delay) and queueing at the predicted utilisation count
    # against a streaming SLO
    wait = fill_wait_ms(ok.candidate.batch_size, 100)
    assert wait == min(1000 * (ok.candidate.batch_size - 1) / 100, 5.0)
    pess = p.latency_p99_ms + p.margin_ms
    queue = queue_wait_ms(pess, 100, p.throughput_items_per_s * math.exp(-m_thr), ok.candidate.concurrency,
                          tuner.burstiness)
    assert queue > 0
    assert pess + wait + queue <= 200
    bad = tuner.decide(JobSpec(family="cnn", kind="streaming", slo_ms=200, arrival_rate_rps=1e7), make_cluster())
    assert not bad.feasible and "throughput" in bad.explanation.note


def test_unknown_family_is_a_config_error(tuner):
    with pytest.raises(ConfigError, match="known families: cnn"):
        tuner.decide(JobSpec(family="gpt", slo_ms=10), make_cluster())


def test_variants_added_between_recommendations_are_considered():
    # The per-observation memos (margins, visit counts) are shaped by the family's variants: adding variants
    # without an observation in between must not reuse them (it used to fail to broadcast).
    t = Tuner(make_variants()[:2], seed=0, explore_rate=0.0)
    job = JobSpec(family="cnn", slo_ms=500, accuracy_floor=0.75, items=1000)
    assert not t.decide(job, make_cluster()).explanation.n_feasible  # only "s" variants: below the floor
    t.add_variants(make_variants()[2:])
    d = t.decide(job, make_cluster())
    assert d.feasible and d.candidate.variant.accuracy >= 0.75


def _device_of(d, cluster) -> int:
    if d.group is not None:
        return d.group.device
    used = {pl.device for pl in cluster.jobs_on(d.pool)}
    return min(i for i in range(cluster.pool(d.pool).count) if i not in used)  # first empty device


def test_capacity_never_exceeded_and_full_cluster_is_infeasible():
    tuner = Tuner(make_variants(), seed=1, explore_rate=0.3)
    cluster = make_cluster()
    total_slots = sum(p.count * p.slots_per_device for p in cluster.pools)
    placed = 0
    for i in range(total_slots + 3):
        job = JobSpec(job_id=f"j{i}", family="cnn", slo_ms=5000, accuracy_floor=0.7, items=100)
        d = tuner.decide(job, cluster)
        if not d.feasible:
            break
        dev = _device_of(d, cluster)
        cluster.placements.append(Placement(job_id=job.job_id, pool=d.pool, device=dev, candidate=d.candidate,
                                            slo_ms=job.slo_ms))
        placed += 1
        for pool in cluster.pools:
            for k in range(pool.count):
                on = cluster.jobs_on(pool.name, k)
                assert len(on) <= pool.slots_per_device
                used = sum(memory_need_gb(p.candidate.variant, p.candidate.concurrency) for p in on)
                assert used <= pool.accelerator.memory_gb
    assert placed == total_slots  # generous SLO: every slot gets used, then the answer is "no free slot"
    d = tuner.decide(JobSpec(family="cnn", slo_ms=5000), cluster)
    assert not d.feasible and "no free slot" in d.explanation.note


def test_observe_is_exactly_once(tuner):
    job = JobSpec(family="cnn", slo_ms=50)
    c = Candidate(pool="t4-pool", accelerator="t4", variant=tuner.variants[0], batch_size=2)
    m = measure(job, c, np.random.default_rng(0), 0)
    assert tuner.observe(m) is True
    before = tuner.predict(job, [c])
    assert tuner.observe(m) is False
    assert tuner.n_observed == 1
    assert tuner.predict(job, [c]) == before
    assert tuner.replay([m, measure(job, c, np.random.default_rng(1), 1)]) == 1


def test_closed_loop_learns_truth_and_keeps_slos():
    # The heuristic prior is off by several x on this truth; the tuner must learn it while (with its
    # margins) rarely breaking the SLO, and end up predicting the chosen configuration closely.
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.3)
    cluster = make_cluster()
    rng = np.random.default_rng(0)
    violations = 0
    errors = []
    n = 150
    for i in range(n):
        job = JobSpec(job_id=f"j{i}", family="cnn", slo_ms=float(rng.choice([5, 10, 30])), accuracy_floor=0.7,
                      items=1000, objective=str(rng.choice(["energy", "completion_time"])))
        d = tuner.decide(job, cluster)
        m = measure(job, d.candidate, rng, i)
        if d.feasible:
            violations += m.latency_p99_ms > job.slo_ms
        if i >= n - 30:
            errors.append(abs(math.log(d.explanation.predicted.latency_p99_ms / truth(d.candidate)[0])))
        assert tuner.observe(m)
    assert violations <= 0.05 * n, violations
    assert np.median(errors) < 0.15, np.median(errors)
    assert d.source in ("model", "explore")


def test_profile_prior_is_used_at_cold_start():
    v = make_variants()
    rows = [{"accelerator": "t4", "variant": x.name, "batch_size": b, "latency_ms": truth(
        Candidate(pool="t4-pool", accelerator="t4", variant=x, batch_size=b))[0]} for x in v for b in (1, 2, 4, 8, 16)]
    tuner = Tuner(v, prior=Prior.make("profile", rows=rows), explore_rate=0.0)
    c = Candidate(pool="t4-pool", accelerator="t4", variant=v[3], batch_size=4)
    (p,) = tuner.predict(JobSpec(family="cnn", slo_ms=10), [c])
    assert p.latency_p99_ms == pytest.approx(truth(c)[0], rel=0.05)  # FM residual ~0 before any observation
    assert tuner.decide(JobSpec(family="cnn", slo_ms=30), make_cluster()).source == "prior"


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="batch_sizes"):
        Tuner(make_variants(), batch_sizes=[0, 2])
    with pytest.raises(ConfigError, match="explore_rate"):
        Tuner(make_variants(), explore_rate=2.0)


def test_retune_keeps_a_good_current_placement_and_leaves_a_bad_one(tuner):
    cluster = make_cluster()
    job = JobSpec(job_id="r1", family="cnn", slo_ms=80, accuracy_floor=0.7, items=1000, objective="energy")
    first = tuner.decide(job, cluster)
    # Running on device 1 of its pool (not the device a fresh decision would pick): staying keeps device 1.
    pool = cluster.pool(first.pool)
    dev = pool.count - 1
    here = Placement(job_id="r1", pool=first.pool, device=dev, candidate=first.candidate, slo_ms=80)
    again = tuner.decide(job, make_cluster([here]), current=here)  # the cluster may still list the job
    assert again.candidate == first.candidate
    assert again.group is not None and again.group.device == dev and again.group.members == ("r1",)
    assert "kept the current placement" in again.explanation.note
    # A current configuration far worse than the best (largest model, batch 1, on the CPU) is left.
    worst = Candidate(pool="cpu-pool", accelerator="cpu", variant=tuner.variants[-2], batch_size=1, concurrency=4)
    bad = Placement(job_id="r1", pool="cpu-pool", device=0, candidate=worst, slo_ms=80)
    moved = tuner.decide(job, make_cluster(), current=bad)
    assert moved.candidate != worst and "kept the current" not in moved.explanation.note


def test_accuracy_floor_is_never_violated_even_when_infeasible():
    tuner = Tuner(make_variants(), seed=2, explore_rate=0.5)
    rng = np.random.default_rng(2)
    best = max(v.accuracy for v in tuner.variants)
    for i in range(60):
        floor = float(rng.choice([0.0, 0.7, 0.75, 0.78, 0.79]))
        job = JobSpec(job_id=f"a{i}", family="cnn", slo_ms=float(rng.choice([0.01, 1, 10, 100])), accuracy_floor=floor,
                      kind=str(rng.choice(["batch", "streaming"])), arrival_rate_rps=float(rng.choice([1, 50, 1e4])),
                      items=100, objective=str(rng.choice(["energy", "completion_time", "cost"])))
        d = tuner.decide(job, make_cluster())
        assert floor <= best and d.variant.accuracy >= floor, (job, d.candidate.key, d.feasible)
        c = d.candidate
        tuner.observe(measure(job, c, rng, i))


def _stream_measurement(job: JobSpec, c: Candidate, i: int, *, p99: float, req_p99: float | None, thr: float,
                        util: float | None = None) -> Measurement:
    return Measurement(measurement_id=f"{job.job_id}-q{i}", job_id=job.job_id, kind="streaming",
                       arrival_rate_rps=job.arrival_rate_rps, candidate=c, items=100, wall_s=5.0,
                       latency_p50_ms=p99 * 0.8, latency_p95_ms=p99 * 0.9, latency_p99_ms=p99,
                       throughput_items_per_s=thr, energy_j_per_item=0.1, energy_source="simulated",
                       gpu_util=util, request_latency_p99_ms=req_p99)


def test_request_level_queueing_is_learned_per_streaming_job(tuner):
    job = JobSpec(job_id="st", kind="streaming", family="cnn", slo_ms=60, accuracy_floor=0.7, arrival_rate_rps=20)
    first = tuner.decide(job, make_cluster())
    assert first.feasible and tuner.burst("st") is None  # no request-level measurement yet: Kingman only
    c = first.candidate
    # Requests queued far beyond the batch latency: a backlog of (300 - 10 - fill) ms x 400 items/s.
    fill = float(fill_wait_ms(float(c.batch_size), 20.0))
    tuner.observe(_stream_measurement(job, c, 0, p99=10.0, req_p99=300.0, thr=400.0))
    assert tuner.burst("st") == pytest.approx((300.0 - 10.0 - fill) / 1000.0 * 400.0)
    # Another job's queueing is not this one's; a batch measurement never creates a backlog.
    assert tuner.burst("other") is None
    again = tuner.decide(job, make_cluster())
    # The same configuration now predicts a request p99 beyond the SLO, so the tuner leaves it (or, if every
    # candidate is that slow for this backlog, says the job is infeasible).
    assert again.candidate.key != c.key or not again.feasible
    # Without request-level data (older measurements, the real path before it reports them) nothing changes.
    plain = Tuner(make_variants(), seed=0, explore_rate=0.0)
    plain.observe(_stream_measurement(job, c, 0, p99=10.0, req_p99=None, thr=400.0))
    assert plain.burst("st") is None


def test_co_runner_load_is_measured_or_estimated_not_assumed_full():
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.0)
    v = tuner.variants[0]
    cand = Candidate(pool="a100-pool", accelerator="a100", variant=v, batch_size=4)
    light = Placement(job_id="light", pool="a100-pool", device=0, candidate=cand, slo_ms=100, arrival_rate_rps=1.0)
    batch = Placement(job_id="flat-out", pool="a100-pool", device=0, candidate=cand, slo_ms=100)
    cluster = ClusterState(pools=[Pool(name="a100-pool", accelerator=CATALOG["a100"], count=1, slots_per_device=3)],
                           placements=[light, batch])
    job = JobSpec(job_id="new", family="cnn", slo_ms=1000, items=10)
    loads = {r.job_id: r.load for r in tuner.decide(job, cluster).candidate.co_runners}
    assert loads["flat-out"] == 1.0  # a batch job keeps its device busy
    assert 0 < loads["light"] < 0.5  # 1 req/s on an A100: estimated from its rate and predicted throughput
    # Once measured in that configuration, the measured share is used (rounded to 0.05).
    spec = JobSpec(job_id="light", kind="streaming", family="cnn", slo_ms=100, arrival_rate_rps=1.0)
    tuner.observe(_stream_measurement(spec, cand, 0, p99=5.0, req_p99=6.0, thr=800.0, util=0.31))
    loads = {r.job_id: r.load for r in tuner.decide(job, cluster).candidate.co_runners}
    assert loads["light"] == pytest.approx(0.3)
    # The measurement was for another configuration than the one placed now: back to the estimate.
    moved = light.model_copy(update={"candidate": cand.model_copy(update={"batch_size": 8})})
    cluster2 = ClusterState(pools=cluster.pools, placements=[moved, batch])
    loads = {r.job_id: r.load for r in tuner.decide(job, cluster2).candidate.co_runners}
    assert loads["light"] != pytest.approx(0.3)
    # State round trip keeps the learned loads and backlogs.
    back = Tuner.from_state_dict(tuner.state_dict())
    assert back.loads == tuner.loads and back.burst("light") == tuner.burst("light")


def test_infeasible_fallback_spreads_onto_an_empty_device():
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.0)
    v = tuner.variants[-1]
    pool = Pool(name="a100-pool", accelerator=CATALOG["a100"], count=2, slots_per_device=4)
    cand = Candidate(pool="a100-pool", accelerator="a100", variant=v, batch_size=1)
    placed = [Placement(job_id=f"p{i}", pool="a100-pool", device=0, candidate=cand, slo_ms=1000) for i in range(3)]
    d = tuner.decide(JobSpec(family="cnn", slo_ms=0.01, items=10), ClusterState(pools=[pool], placements=placed))
    assert not d.feasible
    assert d.group is None and not d.candidate.co_runners  # device 1 (empty), not packed onto device 0


def test_infeasible_running_job_stays_unless_moving_clearly_helps():
    """A job that cannot meet its SLO anywhere is not moved back and forth (each move is a cold start)."""
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.0)
    job = JobSpec(job_id="inf", family="cnn", slo_ms=0.01, items=10)
    cluster = make_cluster()
    first = tuner.decide(job, cluster)
    assert not first.feasible
    pool = cluster.pool(first.pool)
    here = Placement(job_id="inf", pool=first.pool, device=pool.count - 1, candidate=first.candidate, slo_ms=0.01)
    again = tuner.decide(job, make_cluster([here]), current=here)
    assert not again.feasible and again.candidate == first.candidate
    assert again.group is not None and again.group.device == pool.count - 1
    assert "kept the current placement" in again.explanation.note
    # Running somewhere far worse (largest model, batch 1, concurrency 4 on the CPU): it moves.
    worst = Candidate(pool="cpu-pool", accelerator="cpu", variant=tuner.variants[-2], batch_size=1, concurrency=4)
    bad = Placement(job_id="inf", pool="cpu-pool", device=0, candidate=worst, slo_ms=0.01)
    moved = tuner.decide(job, make_cluster(), current=bad)
    assert moved.candidate != worst


@pytest.mark.parametrize("acc", ["cpu", "t4", "a100"])
def test_cold_prior_ranks_bigger_simulator_variant_slower(shared_data, acc):
    # Given the published parameter counts of the simulator's variants, the cold tuner (heuristic prior, no
    # observation) predicts a bigger member of a family slower than a smaller one on the same accelerator; with
    # no size (params=0) it cannot tell them apart.
    from oltunes.sim.perfmodel import PerformanceModel
    from oltunes.sim.variant_params import published_params

    vs = {v.name: v.model_copy(update={"params": published_params(v.name)})
          for v in PerformanceModel(shared_data).variants()}
    assert all(v.params > 0 for v in vs.values())
    for family, small, big in (("resnet", "resnet18_v1", "resnet152_v1"),
                               ("bert", "prajjwal1-bert-tiny", "bert-large-uncased")):
        assert vs[small].family == vs[big].family == family
        job = JobSpec(family=family, slo_ms=100)
        cold = Tuner(list(vs.values()), seed=0, explore_rate=0.0)
        p_small, p_big = cold.predict(job, [Candidate(pool="p", accelerator=acc, variant=vs[n], batch_size=4)
                                            for n in (small, big)])
        assert p_big.latency_p99_ms > p_small.latency_p99_ms, (family, acc)
        blind = Tuner([v.model_copy(update={"params": 0}) for v in vs.values()], seed=0, explore_rate=0.0)
        b_small, b_big = blind.predict(job, [Candidate(pool="p", accelerator=acc, variant=vs[n].model_copy(
            update={"params": 0}), batch_size=4) for n in (small, big)])
        assert b_big.latency_p99_ms == pytest.approx(b_small.latency_p99_ms)


def test_observe_many_accepts_each_new_measurement_once_and_learns_them():
    job = JobSpec(family="cnn", slo_ms=50)
    t = Tuner(make_variants(), seed=0, explore_rate=0.0)
    rng = np.random.default_rng(0)
    cs = [Candidate(pool=p, accelerator=a, variant=t.variants[i], batch_size=b)
          for i, (p, a, b) in enumerate((("t4-pool", "t4", 2), ("a100-pool", "a100", 4), ("cpu-pool", "cpu", 1)))]
    ms = [measure(job, c, rng, i) for i, c in enumerate(cs)]
    before = t.predict(job, cs)
    assert t.observe(ms[0]) is True
    assert t.observe_many([ms[0], ms[1], ms[2], ms[1]]) == [False, True, True, False]  # seen; new; new; repeated
    assert t.n_observed == 3 and t.estimator.n_learned == 3
    assert t.observe_many([]) == [] and t.observe_many(ms) == [False] * 3
    one_by_one = Tuner(make_variants(), seed=0, explore_rate=0.0)
    for m in ms:
        one_by_one.observe(m)
    # the same measurements went in: the correction's statistics and the FM's vocabulary are those of one by one
    batch, single = t.estimator.correction.state_dict(), one_by_one.estimator.correction.state_dict()
    assert batch["sums"] == single["sums"] and batch["counts"] == single["counts"]
    assert list(t.estimator.model._index) == list(one_by_one.estimator.model._index)
    assert t.predict(job, cs) != before


def test_observe_many_of_one_is_observe_and_a_batch_validates_its_first_measurement_as_one_by_one():
    job = JobSpec(family="cnn", slo_ms=50)
    rng = np.random.default_rng(1)
    single, batched, ahead = (Tuner(make_variants(), seed=0, explore_rate=0.0) for _ in range(3))
    vs = single.variants
    cs = [Candidate(pool=p, accelerator=a, variant=vs[i % len(vs)], batch_size=b)
          for i, (p, a, b) in enumerate((("t4-pool", "t4", 2), ("a100-pool", "a100", 4), ("t4-pool", "t4", 2),
                                         ("cpu-pool", "cpu", 1), ("a100-pool", "a100", 8)))]
    ms = [measure(job, c, rng, i) for i, c in enumerate(cs)]
    for m in ms:  # a batch of one each time: the same as observe, to the bit
        single.observe(m)
        batched.observe_many([m])
    assert single.predict(job, cs) == batched.predict(job, cs)
    assert single.estimator.residuals["log_latency"]._res == batched.estimator.residuals["log_latency"]._res
    # all at once: the first measurement's progressive-validation error is one by one's (nothing learnt before it)
    ahead.observe_many(ms)
    first = {k: v[0] for k, v in single.estimator.residuals["log_latency"]._res.items() if k == cs[0].accelerator}
    assert first == {cs[0].accelerator: ahead.estimator.residuals["log_latency"]._res[cs[0].accelerator][0]}


def test_observe_many_learns_a_long_batch_in_chunks_of_learn_chunk():
    from oltunes.tuner.model.estimate import LEARN_CHUNK
    job = JobSpec(family="cnn", slo_ms=50)
    rng = np.random.default_rng(2)
    whole, chunked = (Tuner(make_variants(), seed=0, explore_rate=0.0) for _ in range(2))
    vs = whole.variants
    pools = (("t4-pool", "t4"), ("a100-pool", "a100"), ("cpu-pool", "cpu"))
    cs = [Candidate(pool=pools[i % 3][0], accelerator=pools[i % 3][1], variant=vs[i % len(vs)], batch_size=[1, 4][i % 2])
          for i in range(2 * LEARN_CHUNK + 1)]
    ms = [measure(job, c, rng, i) for i, c in enumerate(cs)]
    whole.observe_many(ms)
    for i in range(0, len(ms), LEARN_CHUNK):
        chunked.observe_many(ms[i:i + LEARN_CHUNK])
    assert whole.predict(job, cs) == chunked.predict(job, cs)
    assert whole.estimator.residuals["log_latency"]._res == chunked.estimator.residuals["log_latency"]._res
