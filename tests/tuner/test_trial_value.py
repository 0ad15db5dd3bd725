"""What a trial is worth and what serving risks, under the estimate's posterior (``tuner.decide.posterior``):
a measured pair is worth less to try again, a longer job makes a trial worth more, an uncertain estimate or one
close to its SLO is charged before it is served."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.tuner.decide.posterior import Z95, expected_improvement, miss_probability, risk_adjusted
from oltunes.types import Candidate, ClusterState, JobSpec, Measurement, Pool
from tests.tuner.variants import make_variants

CLUSTER = ClusterState(pools=[Pool(name="t4-pool", accelerator=CATALOG["t4"], count=2),
                              Pool(name="a100-pool", accelerator=CATALOG["a100"], count=1)])


def test_expected_improvement_is_the_monte_carlo_mean_gain_and_grows_with_uncertainty():
    rng = np.random.default_rng(0)
    for mean, sd in [(0.8, 0.3), (1.2, 0.5), (1.0, 1.0), (3.0, 0.4)]:
        x = np.exp(np.log(mean) + sd * rng.standard_normal(400_000))
        mc = np.maximum(1.0 - x, 0.0).mean()
        got = float(expected_improvement(1.0, np.array([np.log(mean)]), np.array([sd]))[0])
        assert got == pytest.approx(mc, rel=0.02, abs=1e-4)
    # nothing to gain on a free incumbent (a cost objective on a pool priced 0)
    np.testing.assert_array_equal(expected_improvement(0.0, np.log([0.5, 2.0]), np.ones(2)), [0.0, 0.0])
    # sd 0: the plain gain, and none for a worse candidate
    np.testing.assert_allclose(expected_improvement(1.0, np.log([0.5, 2.0]), np.zeros(2)), [0.5, 0.0])
    # a candidate predicted worse is worth more the less is known about it
    ei = expected_improvement(1.0, np.full(4, np.log(1.5)), np.array([0.1, 0.3, 0.6, 1.0]))
    assert np.all(np.diff(ei) > 0)


def _cells(novel: float, req_over_slo: float) -> SimpleNamespace:
    """A one-option, two-variant, one-cell estimate: the same objective, margin 0.4 (log) on every target."""
    job = JobSpec(family="net", kind="streaming", slo_ms=100.0, arrival_rate_rps=10.0)
    lat = np.full((1, 2, 1, 1), 20.0)
    nov = np.array([[0.0, novel]])
    pess = lat * np.exp(0.4 + nov)[:, :, None, None]
    req = np.array([50.0, 100.0 * req_over_slo]).reshape(1, 2, 1, 1)
    return SimpleNamespace(job=job, shape=(1, 2, 1, 1), marg=np.full((1, 3), 0.4), novel=nov, lat=lat,
                           pess_lat=pess, req_lat=req)


def test_serving_charges_an_unmeasured_pair_for_its_uncertainty_and_a_cell_for_its_slo_risk():
    obj = np.ones((1, 2, 1, 1))
    cells = np.arange(2)
    # the same prediction, the second pair never measured: its risk-adjusted objective is higher by exp(sd gap)
    est = _cells(novel=0.5, req_over_slo=0.5)
    adj = risk_adjusted(est, 1, obj, cells, risk=1.0, miss_cost=0.0)
    assert adj[1] / adj[0] == pytest.approx(np.exp(0.5 / Z95))
    np.testing.assert_allclose(risk_adjusted(est, 1, obj, cells, risk=0.0, miss_cost=0.0), [1.0, 1.0])
    # a pessimistic request latency right at the SLO: a 2.5 % chance of a miss, charged at miss_cost
    est = _cells(novel=0.0, req_over_slo=1.0)
    p = miss_probability(est, cells)
    assert p[1] == pytest.approx(0.025, abs=1e-3) and p[0] < 1e-3
    adj = risk_adjusted(est, 1, obj, cells, risk=0.0, miss_cost=4.0)
    assert adj[1] == pytest.approx(1.0 + 4.0 * p[1]) and adj[0] < adj[1]


def _measure(job: JobSpec, c: Candidate, pred, i: int) -> Measurement:
    return Measurement(measurement_id=f"{job.job_id}-m{i}", job_id=job.job_id, kind=job.kind,
                       arrival_rate_rps=job.arrival_rate_rps, candidate=c, items=100, wall_s=1.0,
                       latency_p50_ms=pred.latency_p99_ms * 0.8, latency_p95_ms=pred.latency_p99_ms * 0.95,
                       latency_p99_ms=pred.latency_p99_ms, throughput_items_per_s=pred.throughput_items_per_s,
                       energy_j_per_item=pred.energy_j_per_item, energy_source="simulated", purpose="probe")


def _pair(c: Candidate) -> tuple[str, str]:
    return c.pool, c.variant.name


def test_a_measured_pair_is_worth_less_to_try_again():
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.0)
    job = JobSpec(job_id="b", family="cnn", slo_ms=200, accuracy_floor=0.85, items=200_000, trials=8)
    first = tuner.decide(job, CLUSTER)
    assert first.trials, "a cold start has pairs worth trying"
    values = [t.value for t in first.trials]
    assert values == sorted(values, reverse=True) and all(v > 0 for v in values)
    assert _pair(first.candidate) not in {_pair(t.candidate) for t in first.trials}
    top = first.trials[0]
    for i in range(6):  # the pair measured where it was predicted: nothing new, but now known
        tuner.observe(_measure(job, top.candidate, top.predicted, i))
    again = {_pair(t.candidate): t.value for t in tuner.decide(job, CLUSTER).trials}
    assert again.get(_pair(top.candidate), 0.0) < top.value


def test_a_longer_job_makes_a_trial_worth_more():
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.0)
    short, long = (JobSpec(job_id=f"b{n}", family="cnn", slo_ms=200, items=n, trials=3) for n in (10_000, 1_000_000))
    s, l = tuner.decide(short, CLUSTER), tuner.decide(long, CLUSTER)
    assert s.trials and l.trials and l.trials[0].value > 10 * s.trials[0].value
    # streaming: the duration hint (deadline_s) is the horizon
    hour, day = (JobSpec(job_id=f"s{h}", kind="streaming", family="cnn", slo_ms=200, arrival_rate_rps=50.0,
                         deadline_s=h, trials=3) for h in (3600.0, 86_400.0))
    h, d = tuner.decide(hour, CLUSTER), tuner.decide(day, CLUSTER)
    assert h.trials and d.trials and d.trials[0].value > h.trials[0].value


def test_no_trials_asked_or_nothing_feasible_gives_none():
    tuner = Tuner(make_variants(), seed=0, explore_rate=0.0)
    assert tuner.decide(JobSpec(family="cnn", slo_ms=200, items=1000), CLUSTER).trials == ()
    impossible = JobSpec(family="cnn", slo_ms=0.001, items=1000, trials=3)
    d = tuner.decide(impossible, CLUSTER)
    assert not d.feasible and d.trials == ()


@pytest.mark.parametrize("seed", range(8))
def test_the_choice_is_the_best_risk_adjusted_bet_among_every_feasible_candidate(seed):
    """Whatever ``choose`` leaves unadjusted (it skips cells that cannot win), the chosen cell's risk-adjusted
    objective is within the near-equal band of the lowest over every feasible cell; an unmeasured estimate that is
    lower only by less than its extra uncertainty does not win."""
    from oltunes.tuner.decide.selection import NEAR_EQUAL_CAP

    rng = np.random.default_rng(seed)
    tuner = Tuner(make_variants(), seed=seed, explore_rate=0.0)
    streaming = bool(seed % 2)
    job = JobSpec(job_id=f"j{seed}", kind="streaming" if streaming else "batch", family=("cnn", "vit")[seed % 3 == 0],
                  slo_ms=float(rng.uniform(20, 300)), items=int(rng.integers(1_000, 100_000)),
                  arrival_rate_rps=float(rng.uniform(5, 300)) if streaming else 0.0,
                  objective=("energy", "cost", "completion_time")[seed % 3])
    for i in range(int(rng.integers(0, 12))):  # some measured pairs: their estimates are more certain
        d = tuner.decide(job, CLUSTER)
        tuner.observe(_measure(job, d.candidate, d.explanation.predicted, i))
    est, verdict, objective, obj = tuner._evaluator.evaluate(job, CLUSTER, None)
    if not verdict.n_feasible:
        return
    sel = tuner.selector
    cells = np.flatnonzero(verdict.feasible)
    adj = sel.adjusted(est, objective, obj, cells)
    chosen = int(np.ravel_multi_index(sel.choose(est, verdict.feasible, objective, obj), obj.shape))
    got = float(sel.adjusted(est, objective, obj, np.array([chosen]))[0])
    assert got <= adj.min() * (1 + max(sel.near_equal, NEAR_EQUAL_CAP)) + 1e-12


def _two_options(novel_second: float, obj_first: float) -> tuple[SimpleNamespace, np.ndarray]:
    """Two empty devices, one variant, one setting each, margin 0.4 (log) on every target and far from the SLO;
    the first pair measured (no novelty), the second never (``novel_second``). Objective: first ``obj_first``,
    second 1."""
    from oltunes.types import Variant

    job = JobSpec(family="net", slo_ms=1000.0, items=1000)
    lat = np.full((2, 1, 1, 1), 10.0)
    nov = np.array([[0.0], [novel_second]])
    opt = SimpleNamespace(free_slots_after=1, pool_free_slots_after=1,
                          pool=SimpleNamespace(accelerator=SimpleNamespace(cost_per_hour=1.0)))
    est = SimpleNamespace(job=job, shape=(2, 1, 1, 1), marg=np.full((2, 3), 0.4), novel=nov, lat=lat,
                          pess_lat=lat * np.exp(0.4 + nov)[:, :, None, None], req_lat=lat * 2, pess_thr=lat * 10,
                          energy=np.ones_like(lat), thr=np.full_like(lat, 100.0), options=[opt, opt],
                          variants=[Variant(family="net", name="net-a", size="s", accuracy=0.9)])
    return est, np.array([obj_first, 1.0]).reshape(2, 1, 1, 1)


def test_an_unmeasured_pair_predicted_better_by_less_than_its_uncertainty_does_not_replace_a_measured_one():
    from oltunes.tuner.decide.objectives import Objective
    from oltunes.tuner.decide.selection import Selector

    energy, feasible = Objective.make("energy"), np.ones((2, 1, 1, 1), dtype=bool)
    # 20 % lower, never measured (novelty 0.5: exp(0.5 / 1.96) = 1.29x the uncertainty charge): the measured one
    est, obj = _two_options(novel_second=0.5, obj_first=1.2)
    assert Selector().choose(est, feasible, energy, obj)[0] == 0
    assert Selector(risk=0.0, miss_cost=0.0).choose(est, feasible, energy, obj)[0] == 1  # the plain lowest
    # 40 % lower: worth its uncertainty
    est, obj = _two_options(novel_second=0.5, obj_first=1.4)
    assert Selector().choose(est, feasible, energy, obj)[0] == 1
