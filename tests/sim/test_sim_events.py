"""Drift events: validated in the scenario format, applied by the engine at their time, measured by the report."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.errors import ConfigError
from oltunes.sim import report as R
from oltunes.sim.metrics import event_impact, regret_per_quarter, request_arrays
from oltunes.policies import Policy
from oltunes.simulation import context, prepare, run_policy, run_scenario
from oltunes.sim.scenario import load_scenario, scenario_from_data

BASE = {
    "name": "ev", "seed": 0, "duration_s": 60, "control_interval_s": 5, "retune_interval_s": 15, "truth_sigma": 0.0,
    "pools": [{"name": "a100", "accelerator": "a100", "count": 1}, {"name": "t4", "accelerator": "t4", "count": 2}],
    "workload": {"streaming": [{"trace": "proteus", "scenario": "equal_gamma_300", "families": ["resnet"],
                                "rate_scale": 0.1}]},
}


def _sc(*events, **over):
    return scenario_from_data({**BASE, **over, "events": list(events)}, "scenario ev")


@pytest.mark.parametrize("event, field", [
    ({"at_s": 10, "kind": "melt_down"}, "events.0"),
    ({"at_s": 90, "kind": "rate_step", "factor": 2}, "events.0.at_s"),
    ({"at_s": 10, "kind": "lose_devices", "pool": "h100", "count": 1}, "events.0.pool"),
    ({"at_s": 10, "kind": "slow_accelerator", "accelerator": "v100", "factor": 2}, "events.0.accelerator"),
    ({"at_s": 10, "kind": "slow_accelerator", "accelerator": "t4", "factor": -1}, "events.0.slow_accelerator.factor"),
    ({"at_s": 10, "kind": "co_runner_burst", "pool": "t4", "variant": "gpt2", "load": 2, "duration_s": 5},
     "events.0.co_runner_burst.load"),
    ({"at_s": float("nan"), "kind": "rate_step", "factor": 2}, "events.0.rate_step.at_s"),
])
def test_a_bad_event_is_refused_naming_its_field(event, field):
    with pytest.raises(ConfigError, match=rf"scenario ev: .*{field}"):
        _sc(event)


def test_a_burst_of_an_unknown_variant_fails_before_the_run(shared_data):
    p = prepare(_sc({"at_s": 10, "kind": "co_runner_burst", "pool": "t4", "variant": "nope", "load": 0.5,
                     "duration_s": 5}))
    with pytest.raises(ConfigError, match="unknown variant 'nope'"):
        run_policy(p, "static-profile")


def _latency_by_half(res, at_s):
    req = request_arrays(res)
    before = req["latency"][(req["arrival"] < at_s) & ~np.isnan(req["latency"])]
    after = req["latency"][(req["arrival"] >= at_s + 5) & ~np.isnan(req["latency"])]
    return float(np.median(before)), float(np.median(after))


def test_a_rate_step_changes_only_the_arrivals_after_it(shared_data):
    plain = prepare(_sc())
    step = prepare(_sc({"at_s": 30, "kind": "rate_step", "factor": 2.5}))
    a, b = plain.jobs[0].arrivals, step.jobs[0].arrivals
    assert np.array_equal(a[a < 30], b[b < 30])
    assert (b >= 30).sum() / (a >= 30).sum() == pytest.approx(2.5, rel=0.2)
    assert np.all(np.diff(b) >= 0) and b.max() < 60
    assert plain.jobs[0].spec.arrival_rate_rps == step.jobs[0].spec.arrival_rate_rps  # the declared rate
    other = prepare(_sc({"at_s": 30, "kind": "rate_step", "factor": 2.5, "families": ["bert"]}))
    assert np.array_equal(other.jobs[0].arrivals, a)


def test_a_slowdown_is_felt_at_once_by_a_job_that_stays_put(shared_data):
    """static-profile places once and never moves: after the event its requests take at least 2x as long as in
    the same run without the event (3x the service time, plus the queueing that brings); before it, the same."""
    one = [{"name": "a100", "accelerator": "a100", "count": 1}]
    ev = {"at_s": 30, "kind": "slow_accelerator", "accelerator": "a100", "factor": 3.0}
    before, after = _latency_by_half(run_policy(prepare(_sc(ev, pools=one)), "static-profile"), 30)
    before0, after0 = _latency_by_half(run_policy(prepare(_sc(pools=one)), "static-profile"), 30)
    assert before == pytest.approx(before0, rel=0.02)
    assert after / after0 > 2.0


def test_a_co_runner_burst_slows_its_device_for_its_duration_only(shared_data):
    one = [{"name": "a100", "accelerator": "a100", "count": 1}]
    burst = {"at_s": 20, "kind": "co_runner_burst", "pool": "a100", "variant": "gpt2-xl", "load": 1.0,
             "duration_s": 20}

    def latency(sc):
        req = request_arrays(run_policy(prepare(sc), "static-profile"))
        return req["latency"], req["arrival"]

    (lat, t), (lat0, _) = latency(_sc(burst, pools=one)), latency(_sc(pools=one))

    def ratio(lo, hi):
        m = (t >= lo) & (t < hi)
        return float(np.nanmedian(lat[m]) / np.nanmedian(lat0[m]))
    assert ratio(0, 20) == pytest.approx(1.0, rel=0.02)
    assert ratio(25, 40) > 1.15  # interference + time-slicing (gavel packing) with a fully busy neighbour
    assert ratio(50, 60) < 1.15


def test_a_learning_policy_measures_next_to_a_burst_tenant(shared_data):
    """The burst's tenant is a co-runner in the learner's measurements: its id must be a valid one (it once had an
    '@', and the first measurement next to it raised)."""
    one = [{"name": "a100", "accelerator": "a100", "count": 1}]
    burst = {"at_s": 10, "kind": "co_runner_burst", "pool": "a100", "variant": "gpt2-xl", "load": 1.0,
             "duration_s": 30}
    p = prepare(_sc(burst, pools=one, duration_s=40))
    policy = Policy.make("oltunes", ctx=context(p, p.truth()))
    seen = []
    learn = policy.observe_many  # the engine reports each control interval's measurements together
    policy.observe_many = lambda ms: (seen.extend(ms), learn(ms))
    run_policy(p, policy)
    assert any(c.job_id.startswith("burst-") for m in seen for c in m.candidate.co_runners)


def test_lost_devices_evict_their_jobs_which_are_placed_again_elsewhere(shared_data):
    sc = _sc({"at_s": 30, "kind": "lose_devices", "pool": "a100", "count": 1},
             workload={"streaming": [{"trace": "proteus", "scenario": "equal_gamma_300",
                                      "families": ["resnet", "bert", "mobilenet"], "rate_scale": 2.0}]})
    p = prepare(sc)
    res = run_policy(p, "oracle")
    for r in res.runs:  # nobody runs on the lost pool at the end, and no request is lost
        assert r.placement is None or r.placement.pool != "a100"
        served = ~np.isnan(r.done)
        assert np.all(served ^ r.dropped)
    baseline = run_policy(prepare(_sc(workload=sc.workload.model_dump())), "oracle")
    assert any(r.placement.pool == "a100" for r in baseline.runs)  # it did use the pool while it could


def test_report_gives_before_after_recovery_and_regret_per_quarter(shared_data):
    sc = load_scenario("tiny").model_copy(update={"events": _sc(
        {"at_s": 30, "kind": "slow_accelerator", "accelerator": "t4", "factor": 4.0},
        {"at_s": 30, "kind": "rate_step", "factor": 1.5},
        pools=load_scenario("tiny").pools).events})
    results = run_scenario(prepare(sc), ["oracle", "round-robin"])
    rep = R.build(sc, results)
    (ev,) = rep["events"]  # two events at one time are one change
    assert ev["at_s"] == 30 and ev["event"].startswith("slow_accelerator") and "; rate_step" in ev["event"]
    for name in ("oracle", "round-robin"):
        x = ev["policies"][name]
        assert 0 <= x["before"] <= 1 and 0 <= x["after"] <= 1
        assert x["recovery_s"] is None or 0 <= x["recovery_s"] < 30
    orc, rr = results["oracle"][0], results["round-robin"][0]
    assert regret_per_quarter(orc, orc) == [0.0] * 4
    assert rep["regret_per_quarter"]["round-robin"] == regret_per_quarter(rr, orc)
    assert sum(regret_per_quarter(rr, orc)) > 0
    # a policy judged against itself never needs to recover
    assert event_impact(rr, 30, 30, 15, 60, rr)["recovery_s"] == 0.0
    cols, rows = R.event_rows(rep)
    assert len(rows) == 2 and cols[-1] == "recovery s"


def test_shipped_shift_scenario_changes_the_world_half_way(shared_data):
    sc = load_scenario("shift")
    assert sc.events and all(e.at_s == sc.duration_s / 2 for e in sc.events)
