"""The estimator's caches (scored grids, priors, loads kept while nothing changed) never change a decision: a
recorded sequence — repeated jobs, jobs leaving and moving, re-tunes with ``current=``, fresh placement objects,
observations in between — gives exactly the decisions, explanations included, of a tuner that scores every grid
afresh."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.learner.features import job_context
from oltunes.occupancy import Occupancy
from oltunes.tuner import Tuner
from oltunes.tuner.model import estimate
from oltunes.tuner.decide.candidates import placement_options
from oltunes.types import Candidate, ClusterState, JobSpec, Measurement
from tests.tuner.test_placement_scale import _strip, random_cluster
from tests.tuner.variants import make_variants


def _measurement(rng: np.random.Generator, cluster: ClusterState, variants, i: int) -> Measurement:
    pool = cluster.pools[int(rng.integers(len(cluster.pools)))]
    v = variants[int(rng.integers(len(variants)))]
    b, c = int(rng.choice([1, 4, 8])), int(rng.integers(1, 3))
    p99 = float(rng.uniform(5, 300))
    thr = 1000.0 * b * c / p99
    rate = float(rng.choice([0.0, 20.0, 60.0]))  # streaming ones teach the job features (kind, rate)
    return Measurement(measurement_id=f"m{i}", job_id=f"j{i}", kind="streaming" if rate else "batch",
                       arrival_rate_rps=rate, request_latency_p99_ms=p99 * 1.5 if rate else None,
                       candidate=Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=v,
                                           batch_size=b, concurrency=c),
                       items=100, wall_s=100 / thr, latency_p50_ms=p99 * 0.7, latency_p95_ms=p99 * 0.9,
                       latency_p99_ms=p99, throughput_items_per_s=thr, energy_j_per_item=1.0 / thr,
                       energy_source="simulated", accuracy=v.accuracy, gpu_util=0.6, simulated=True)


def _sequence(seed: int) -> list[dict]:
    variants = make_variants()
    rng = np.random.default_rng(seed)
    tuner = Tuner(variants, seed=seed)
    cluster = random_cluster(rng, variants, max_count=120)
    jobs = [JobSpec(job_id=f"new-{f}-{k}-{r:g}", family=f, kind=k, slo_ms=s, arrival_rate_rps=r, items=500,
                    accuracy_floor=a)
            for f in ("cnn", "vit") for k, s, r, a in (("batch", 400.0, 0.0, 0.0), ("streaming", 150.0, 60.0, 0.7),
                                                       ("streaming", 80.0, 20.0, 0.0))]
    placed, out = list(cluster.placements), []
    for i in range(120):
        job = jobs[i % len(jobs)]
        if i % 17 == 16:
            tuner.observe(_measurement(rng, cluster, variants, i))
        if i % 9 == 8 and len(placed) > 2:  # one job leaves, another moves to the next device
            placed.pop(int(rng.integers(len(placed))))
            k = int(rng.integers(len(placed)))
            placed[k] = placed[k].model_copy(update={"device": placed[k].device + 1})
            cluster = ClusterState.model_construct(pools=cluster.pools, placements=list(placed))
        if i % 7 == 0 and placed:
            current = placed[int(rng.integers(len(placed)))].model_copy(update={"job_id": job.job_id})
            d = tuner.decide(job, cluster, current=current)
        elif i % 5 == 0:  # what the HTTP service sees: equal placements, new objects
            d = tuner.decide(job, ClusterState.model_construct(
                pools=cluster.pools, placements=[p.model_copy() for p in placed]))
        else:
            d = tuner.decide(job, cluster)
        out.append(_strip(d))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_decisions_equal_rebuilt_ones(monkeypatch, seed):
    cached = _sequence(seed)
    # the reference: each call scores the grid afresh
    monkeypatch.setattr(estimate.Estimator, "_grid", lambda self, ctx, o, v: self._score_grid(ctx, o, v))
    rebuilt = _sequence(seed)
    assert len(cached) == len(rebuilt) == 120
    assert cached == rebuilt
    assert sum(d["feasible"] for d in cached) > 10
    # shared devices were scored (co-runner checks ran) and explorations drew from the RNG
    assert any("+shared" in a["candidate_key"] for d in cached for a in d["explanation"]["runner_ups"])
    assert any(d["source"] == "explore" for d in cached)


def test_a_cached_grid_is_read_only_and_dropped_after_an_observation():
    variants = make_variants()
    rng = np.random.default_rng(3)
    tuner = Tuner(variants, seed=0)
    cluster = random_cluster(rng, variants)
    job = JobSpec(family="cnn", slo_ms=300.0, items=100)
    tuner.decide(job, cluster)
    tuner.decide(job, cluster)  # (the first call also initialises the model, which moves its version)
    est = tuner.estimator
    (first,) = est.grid_memo._current().values()
    with pytest.raises(ValueError):
        first[0][...] = 0.0  # a shared grid cannot be changed by a caller
    tuner.decide(job, cluster)
    (same,) = est.grid_memo._current().values()
    assert same is first  # reused
    tuner.observe(_measurement(rng, cluster, variants, 0))
    tuner.decide(job, cluster)
    (again,) = est.grid_memo._current().values()
    assert again is not first and not np.array_equal(again[0], first[0])


def test_the_correction_and_visit_grids_scored_per_accelerator_type_equal_the_per_option_ones():
    """Options of one accelerator type share their correction and visit rows: computed once, the same numbers."""
    variants = make_variants()
    rng = np.random.default_rng(5)
    tuner = Tuner(variants, seed=0)
    cluster = random_cluster(rng, variants)
    for i in range(40):
        tuner.observe(_measurement(rng, cluster, variants, i))
    est = tuner.estimator
    regions = [p.accelerator.name for p in cluster.pools] * 3  # each type several times, interleaved
    fam = [v for v in variants if v.family == "cnn"]
    full = est.correction.grid(regions, fam, est.batch_sizes, est.concurrencies, est.priors.growth)
    assert np.array_equal(est._correction_grid(regions, fam), full)
    # another list of the same types in the same first-appearance order reads the rows kept for the first
    other = regions[: len(regions) // 3] + regions[:2]
    assert np.array_equal(est._correction_grid(other, fam),
                          est.correction.grid(other, fam, est.batch_sizes, est.concurrencies, est.priors.growth))
    assert not np.array_equal(full[:, 0], full[:, 1])  # the types really differ (the test can fail)
    visits = est._visit_grid(regions, fam)
    assert visits.sum() > 0 and visits.tolist() == [[est.visits.get(f"{a}/{v.name}", 0) for v in fam] for a in regions]


def test_a_kept_load_equals_a_fresh_one_after_observations_of_this_job_and_others():
    """``load_of`` keeps each placement's busy share across observations of other jobs; an observation of the job
    itself (a new measured load) moves it. Every answer equals that of a tuner that replayed the same history."""
    variants = make_variants()
    rng = np.random.default_rng(5)
    cluster = random_cluster(rng, variants, max_count=30)
    streams = [p for p in cluster.placements if p.arrival_rate_rps > 0]
    assert len(streams) > 3
    tuner, seen = Tuner(variants, seed=0), []
    moved = 0
    for i in range(40):
        p = streams[int(rng.integers(len(streams)))]
        m = _measurement(rng, cluster, variants, i)
        if i % 2:  # a measurement of a placed job, at its own configuration: its measured load is the one read
            m = m.model_copy(update={"job_id": p.job_id, "candidate": p.candidate,
                                     "gpu_util": float(rng.uniform(0.1, 1.0))})
        before = [tuner.estimator.load_of(q) for q in streams]
        tuner.observe(m)
        seen.append(m)
        fresh = Tuner(variants, seed=0)
        fresh.replay(seen)
        after = [tuner.estimator.load_of(q) for q in streams]
        assert after == [fresh.estimator.load_of(q) for q in streams]
        moved += before != after
    assert moved > 3  # the measured loads did move some answers


def test_a_kept_prior_log_and_growth_equal_fresh_ones_and_are_read_only():
    """``PriorTable.log`` and ``growth`` kept per what they read (configuration, co-runners' total load, stream rate)
    equal, to the bit, the same table's figures with nothing kept (a memo whose version moves on every call),
    whatever the order."""
    from oltunes.tuner.model.memo import Memo
    from oltunes.tuner.model.prior_table import PriorTable
    from oltunes.types import CoRunner

    variants = make_variants()
    est = Tuner(variants, seed=0).estimator
    kept, tick = est.priors, iter(range(10**9))
    plain = PriorTable(kept.prior, Memo(lambda: next(tick)), kept.batch_sizes, kept.concurrencies)
    rng = np.random.default_rng(5)
    asked = []
    for i in range(300):
        v = variants[int(rng.integers(len(variants)))]
        co = tuple(CoRunner(job_id=f"o{k}", family=w.family, variant=w.name, size=w.size,
                            load=float(rng.choice([0.25, 0.5, 1.0])))
                   for k, w in enumerate(variants[: int(rng.integers(0, 3))]))
        c = Candidate(pool="p", accelerator=str(rng.choice(["t4", "a100", "cpu"])), variant=v,
                      batch_size=int(rng.choice([1, 4, 8])), concurrency=int(rng.integers(1, 3)), co_runners=co)
        rate = float(rng.choice([0.0, 20.0, 60.0]))
        ctx = job_context(JobSpec(family=v.family, kind="streaming" if rate else "batch", slo_ms=100.0,
                                  arrival_rate_rps=rate, items=10))
        asked.append((c, ctx))
        for c_, ctx_ in (asked[int(rng.integers(len(asked)))], (c, ctx)):  # repeats and new ones, interleaved
            got = kept.log(c_, ctx_)
            assert got.tobytes() == plain.log(c_, ctx_).tobytes() and not got.flags.writeable
            got = kept.growth(c_.accelerator, c_.variant, c_.batch_size)
            assert got.tobytes() == plain.growth(c_.accelerator, c_.variant, c_.batch_size).tobytes()
            assert not got.flags.writeable
    assert len(est.memo.table("prior_log")) < len(asked)  # repeats were kept, not recomputed


@pytest.mark.parametrize("seed", range(4))
def test_prior_grid_and_placement_rows_kept_per_option_equal_the_whole_grid_at_once(seed):
    """The prior's grid and the placements' index arrays are kept per option and stacked: the same numbers as
    ``Prior.adjust`` broadcast over every option at once and one ``index`` call over every option."""
    from oltunes.learner.features import placement_features
    from oltunes.tuner.model.prior import Prior
    from oltunes.tuner.model.prior_table import stream_rate

    variants = make_variants()
    rng = np.random.default_rng(seed)
    tuner = Tuner(variants, seed=seed)
    cluster = random_cluster(rng, variants, max_count=4)
    for i in range(30):
        tuner.observe(_measurement(rng, cluster, variants, i))
    est, pr = tuner.estimator, tuner.estimator.priors
    fam = [v for v in variants if v.family == "cnn"]
    options = placement_options(Occupancy(cluster), load_of=est.load_of)
    assert len({o.prior_key for o in options}) >= 2  # accelerators or co-loads: blocks that differ
    b = np.array(pr.batch_sizes, dtype=float)[None, None, :, None]
    c = np.array(pr.concurrencies, dtype=float)[None, None, None, :]
    base = np.stack([np.array([[pr.prior.base(o.pool.accelerator, v, k) for k in (1, *pr.batch_sizes)] for v in fam])
                     for o in options])  # P, V, 1+B, 2
    load = np.array([sum(x.load for x in o.co_features) for o in options], dtype=float)[:, None, None, None]
    for rate in (0.0, 37.0, 410.0):
        job = JobSpec(family="cnn", kind="streaming" if rate else "batch", slo_ms=100.0, arrival_rate_rps=rate)
        ctx = job_context(job)
        est.priors.grid(options[::2], fam, ctx)  # some blocks kept from an earlier list
        got = est.priors.grid(options, fam, ctx)
        srate = float(f"{stream_rate(ctx, pr.partial_batches):.2g}")
        whole = Prior.adjust(base[:, :, 1:, 0][..., None], base[:, :, 1:, 1][..., None], b, c, load,
                             base[:, :, 0, 0][..., None, None], base[:, :, 0, 1][..., None, None], srate)
        assert np.array_equal(got, np.stack([np.broadcast_to(a, got.shape[1:]) for a in whole]))
        place = est._part_arrays(ctx, options, fam)[1]
        want = est.model.index([placement_features(o.pool.name, o.pool.accelerator.name, o.co_features)
                                for o in options])
        assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(place, want))
