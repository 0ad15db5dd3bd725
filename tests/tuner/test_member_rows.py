"""Co-runner checks re-plan only the members whose device changed: the per-member memo gives exactly what a
cold start gives, after any sequence of cluster changes (jobs moving between devices, joining, leaving)."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.tuner import Tuner
from oltunes.tuner.candidates import co_runner_of, placement_options
from oltunes.tuner.corunners import _Tables, member_checks
from oltunes.tuner.occupancy import Occupancy
from oltunes.types import ClusterState, JobSpec, Measurement
from tests.tuner.test_placement_scale import random_cluster
from tests.tuner.variants import make_variants


def _checks(tuner: Tuner, cluster: ClusterState, job: JobSpec, occ: Occupancy | None = None):
    """The checks for ``job``; ``occ``: an index kept in sync across calls (as the tuner keeps one), so pools
    that did not change hand back the same option objects (and the members kept with them)."""
    est = tuner.estimator
    if occ is None:
        occ = Occupancy.of(cluster.placements)
    else:
        occ.sync(cluster.placements)
    options = placement_options(cluster.pools, occ, load_of=est.load_of)
    return member_checks(est, options, tuner.catalogue.family(job.family), job)


def _moved(rng, cluster: ClusterState) -> ClusterState:
    """One job moves to another device of its pool (its old and new co-runners see a different device)."""
    placements = list(cluster.placements)
    if len(placements) < 2:
        return cluster
    i = int(rng.integers(len(placements)))
    pool = cluster.pool(placements[i].pool)
    placements[i] = placements[i].model_copy(update={"device": int(rng.integers(pool.count))})
    if rng.random() < 0.3:
        del placements[int(rng.integers(len(placements)))]
    return ClusterState.model_construct(pools=cluster.pools, placements=placements)


def _measured(rng, cluster: ClusterState, k: int) -> Measurement:
    """A measurement of one placed job (it moves the margins, visits and correction the checks read)."""
    p = cluster.placements[int(rng.integers(len(cluster.placements)))]
    p99 = float(rng.uniform(5.0, 300.0))
    return Measurement(measurement_id=f"m{k}", job_id=p.job_id, candidate=p.candidate, items=100, wall_s=1.0,
                       latency_p50_ms=p99 / 2, latency_p95_ms=p99 * 0.9, latency_p99_ms=p99,
                       throughput_items_per_s=100.0, energy_j_per_item=0.5, energy_source="simulated")


@pytest.mark.parametrize("seed", range(8))
def test_member_checks_after_changes_equal_a_cold_start(seed):
    rng = np.random.default_rng(seed)
    variants = make_variants()
    cluster = random_cluster(rng, variants, max_count=4)  # small pools: devices shared by several jobs
    job = JobSpec(family="cnn", kind="streaming", slo_ms=150.0, arrival_rate_rps=60.0)
    warm, occ = Tuner(variants, seed=seed), Occupancy()
    seen: list[Measurement] = []
    for step in range(25):
        cluster = _moved(rng, cluster)
        if step % 4 == 3 and cluster.placements:  # observations between decisions
            seen.append(_measured(rng, cluster, step))
            warm.observe(seen[-1])
        got = _checks(warm, cluster, job, occ)
        cold = Tuner(variants, seed=seed)
        cold.replay(seen)
        want = _checks(cold, cluster, job)
        assert got.by_option == want.by_option and got.sizes == want.sizes
        assert np.array_equal(got.ok, want.ok)
        assert (got.slow is None) == (want.slow is None)
        if got.slow is not None:
            assert np.array_equal(got.slow, want.slow)


@pytest.mark.parametrize("seed", range(12))
def test_checks_from_kept_option_terms_equal_the_plain_sums_over_every_member(seed):
    """The checks stack each option's kept terms (some kept from an earlier decision on part of the options);
    every member's predicted slowdown and SLO check are, bit for bit, those of the plain FM sums (``raw_sums``
    and ``predict_many``) over the whole member list at once."""
    from oltunes.tuner.corunners import (
        LOAD_LEVELS,
        _member_checks,
        _member_terms,
        _newcomer,
    )
    from oltunes.tuner.estimate import LAT
    from oltunes.tuner.member_rows import option_members

    rng = np.random.default_rng(seed)
    variants = make_variants()
    tuner = Tuner(variants, seed=seed)
    cluster = random_cluster(rng, variants, max_count=4)
    while not any(o.members for o in placement_options(cluster.pools, Occupancy.of(cluster.placements))):
        cluster = random_cluster(rng, variants, max_count=4)  # drawn until a device is shared: the case under test
    for k, p in enumerate(cluster.placements[:8]):  # measured beside its co-runners: the vocabulary learns the
        co = tuple(co_runner_of(q) for q in cluster.jobs_on(p.pool, p.device) if q.job_id != p.job_id)  # co features
        m = _measured(rng, cluster, k)
        tuner.observe(m.model_copy(update={"candidate": p.candidate.model_copy(update={"co_runners": co})}))
    est = tuner.estimator
    family = tuner.catalogue.family("cnn")
    job = JobSpec(family="cnn", kind="streaming", slo_ms=float(rng.uniform(20.0, 400.0)), arrival_rate_rps=30.0)
    options = placement_options(cluster.pools, Occupancy.of(cluster.placements), load_of=est.load_of)
    _member_checks(est, options[::2], family, job)  # some options' terms kept by an earlier decision
    got = _member_checks(est, options, family, job)
    members = [(p, o, m) for p, o in enumerate(options) for m in o.members]
    assert members
    rows = [r for o in options for r in option_members(est, o)[2]]
    terms = [_member_terms(est, {}, m.candidate) for _, _, m in members]
    margins, corr = (np.array(col) for col in zip(*terms))
    sizes = got.sizes
    M, S, L = len(members), len(sizes), len(LOAD_LEVELS)
    raw = est.model.raw_sums([r.x_with for r in rows], _newcomer(est, ("cnn", sizes)))
    log_with = raw[:, :, LAT].reshape(M, S, L) + np.array([r.prior_with for r in rows])[:, None, :] + corr[:, None, None]
    log_alone = (est.model.predict_many(*est.model.index([r.x_alone for r in rows]))[:, LAT]
                 + np.array([r.prior_alone for r in rows]) + corr)
    good = (np.exp(log_with + margins[:, None, None]) + np.array([r.wait for r in rows])[:, None, None]
            <= np.array([r.slo for r in rows])[:, None, None])
    ok = np.ones((len(options), len(family), L), dtype=bool)
    np.logical_and.at(ok, np.array([p for p, _, _ in members]), good[:, [sizes.index(v.size) for v in family], :])
    assert np.array_equal(got.slow, np.exp(log_with - log_alone[:, None, None]))
    assert np.array_equal(got.ok, ok)
    assert got.by_option == {p: [(m.job_id, i) for i, (q, _, m) in enumerate(members) if q == p]
                             for p in dict.fromkeys(p for p, _, _ in members)}


def test_the_checks_kept_per_options_list_hold_one_list_per_family_and_equal_fresh_ones():
    """The co-runner checks are kept with the options list they were made for, one (the last) per family: many
    requests with new placement objects (the HTTP service) neither grow the table nor change what a decision
    reads (the same checks as a tuner that never saw the earlier lists)."""
    variants = make_variants()
    rng = np.random.default_rng(11)
    cluster = random_cluster(rng, variants, max_count=12)
    tuner = Tuner(variants, seed=0)
    jobs = [JobSpec(family=f, slo_ms=200.0, items=100) for f in ("cnn", "vit")]
    assert any(len(ms) > 1 for ms in _devices(cluster))  # a shared device: the checks have members to score
    for i in range(80):
        fresh = ClusterState.model_construct(pools=cluster.pools,
                                             placements=[p.model_copy() for p in cluster.placements])
        job = jobs[i % 2]
        got = _checks(tuner, fresh, job)
        want = _checks(Tuner(variants, seed=0), fresh, job)
        assert np.array_equal(got.ok, want.ok) and got.by_option == want.by_option
        assert len(tuner.estimator.member_memo.get("corunners", _Tables).by_options) <= 2


def _devices(cluster: ClusterState) -> list[list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for p in cluster.placements:
        out.setdefault((p.pool, p.device), []).append(p.job_id)
    return list(out.values())


@pytest.mark.parametrize("seed", range(20))
def test_a_members_prior_latency_from_its_heads_is_the_priors_adjust(seed):
    """The members' prior log latencies per co-load (the load-free terms kept per member) equal the prior's own
    ``adjust`` bit for bit, streaming (dynamic batches) or not."""
    from oltunes.tuner.corunners import LOAD_LEVELS
    from oltunes.tuner.estimate import LAT
    from oltunes.tuner.member_prior import prior_latency, prior_latency_heads
    from oltunes.tuner.prior import Prior

    rng = np.random.default_rng(seed)
    for _ in range(50):
        lat0, lat1 = float(rng.uniform(0.1, 500.0)), float(rng.uniform(0.05, 100.0))
        en0, en1 = float(rng.uniform(0.01, 5.0)), float(rng.uniform(0.01, 5.0))
        batch, conc = float(rng.choice([1, 2, 4, 8, 32])), float(rng.choice([1, 2, 3, 4]))
        rate = float(rng.choice([0.0, rng.uniform(0.01, 5.0), rng.uniform(5.0, 5000.0)]))
        co_load = float(rng.choice([0.0, 0.05, rng.uniform(0.0, 4.0)]))
        load = np.concatenate([[0.0], co_load + LOAD_LEVELS])
        want = Prior.adjust(lat0, en0, batch, conc, load, lat1, en1, rate)[LAT]
        got = prior_latency(prior_latency_heads(lat0, batch, conc, lat1, rate), load)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_the_same_stack_of_option_terms_is_scored_once_per_model():
    """A decision whose options stack the very same terms as the last one of its family (another list, another
    pool changed) reads last time's sums, and its checks equal a fresh tuner's; a model change scores again."""
    variants = make_variants()
    rng = np.random.default_rng(5)
    cluster = random_cluster(rng, variants, max_count=12)
    tuner = Tuner(variants, seed=0)
    job = JobSpec(family="cnn", slo_ms=120.0, items=100)
    occ = Occupancy.of(cluster.placements)
    options = placement_options(cluster.pools, occ, load_of=tuner.estimator.load_of)
    assert any(o.members for o in options)
    scored = []
    model = tuner.estimator.model
    raw_sums_of = model.raw_sums_of
    model.raw_sums_of = lambda *a: scored.append(1) or raw_sums_of(*a)
    family = tuner.catalogue.family(job.family)
    member_checks(tuner.estimator, options, family, job)  # a fresh FM makes its tables on first use: its version
    first = member_checks(tuner.estimator, list(options), family, job)  # moves once, then holds
    scored.clear()
    again = member_checks(tuner.estimator, list(options), family, job)  # a new list of the same options
    assert len(scored) == 0
    want = member_checks(Tuner(variants, seed=0).estimator, list(options), family, job)
    for got in (first, again):
        assert np.array_equal(got.ok, want.ok) and got.by_option == want.by_option
        assert np.array_equal(got.slow, want.slow)
    tuner.observe(_measured(rng, cluster, 0))
    member_checks(tuner.estimator, list(options), family, job)
    assert len(scored) == 1


@pytest.mark.parametrize("seed", range(6))
def test_a_members_own_part_reads_its_prior_at_a_co_load_as_the_plain_concatenated_loads(seed):
    """``_MemberOwn.prior_at`` (the loads written into a copy of [0, levels] shifted by the co-load) gives, bit for
    bit, the prior latency at ``[0, co_load + each level]``, for a co-load of no co-runner (the int 0 of an empty
    sum) or of several; read-only, and the same array when asked again."""
    from oltunes.tuner.member_prior import (
        LOAD_LEVELS,
        prior_latency,
        prior_latency_heads,
    )
    from oltunes.tuner.member_rows import _MemberOwn

    rng = np.random.default_rng(seed)
    heads = prior_latency_heads(float(rng.uniform(0.1, 500.0)), float(rng.choice([1, 8, 32])),
                                float(rng.choice([1, 2, 4])), float(rng.uniform(0.05, 100.0)),
                                float(rng.choice([0.0, rng.uniform(1.0, 500.0)])))
    own = _MemberOwn({}, heads, 0.0)
    for co_load in [0, 0.0, *rng.uniform(0.0, 4.0, 20), *np.round(rng.uniform(0.05, 3.0, 20) * 20) / 20]:
        got = own.prior_at(float(co_load) if not isinstance(co_load, int) else co_load)
        want = prior_latency(heads, np.concatenate([[0.0], co_load + LOAD_LEVELS]))
        assert got.tobytes() == want.tobytes() and not got.flags.writeable
        assert own.prior_at(co_load) is got
