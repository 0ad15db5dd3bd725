"""Scenario files validate with errors naming the field; workloads come from the real traces, seeded."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from oltunes.errors import ConfigError
from oltunes.sim.perfmodel import PerformanceModel
from oltunes.sim.scenario import load_scenario, scenario_from_data, shipped
from oltunes.sim.workload import build_workload


def _base() -> dict:
    return {
        "name": "t",
        "duration_s": 30,
        "pools": [{"name": "a", "accelerator": "a100", "count": 1}],
        "workload": {"streaming": [{"trace": "proteus", "families": ["resnet"], "rate_scale": 0.5}]},
    }


def test_shipped_scenarios_load():
    names = shipped()
    assert {"light", "bursty", "overloaded", "heterogeneous-heavy", "tiny"} <= set(names)
    for n in names:
        sc = load_scenario(n)
        assert sc.name == n and sc.pool_list()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("workload", "streaming", 0, "replicas"), 0, "workload.streaming.0.replicas"),
        (("duration_s",), -5, "duration_s"),
        (("workload", "streaming", 0, "trace"), "netflix", "workload.streaming.0.trace"),
        (("pools", 0, "accelerator"), "tpu", "pools[0].accelerator"),
        (("pools", 0, "count"), "many", "count"),
        (("batch_sizes",), [0, 4], "batch_sizes"),
    ],
)
def test_bad_field_is_named(tmp_path, path, value, field):
    data = _base()
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e:
        load_scenario(f)
    assert field in str(e.value) and str(f) in str(e.value)


def test_unknown_field_and_missing_file_and_empty_workload(tmp_path):
    data = _base() | {"durations": 3}
    with pytest.raises(ConfigError, match="durations"):
        scenario_from_data(data)
    with pytest.raises(ConfigError, match="shipped"):
        load_scenario("no-such-scenario")
    with pytest.raises(ConfigError, match="workload"):
        scenario_from_data(_base() | {"workload": {}})


def test_workload_is_real_seeded_and_thinned(shared_data):
    pm = PerformanceModel(shared_data)
    sc = scenario_from_data(_base())
    a = build_workload(sc, pm, shared_data)
    b = build_workload(sc, pm, shared_data)
    assert np.array_equal(a[0].arrivals, b[0].arrivals)
    arr = a[0].arrivals
    assert np.all(np.diff(arr) >= 0) and arr[0] >= 0 and arr[-1] < sc.duration_s
    full = build_workload(scenario_from_data(_base() | {"workload": {"streaming": [
        {"trace": "proteus", "families": ["resnet"]}]}}), pm, shared_data)[0]
    assert 0.35 < len(arr) / len(full.arrivals) < 0.65  # rate_scale 0.5 keeps about half
    # over a whole loop of the trace (the rate varies within it), rate_scale 2 doubles the requests
    long = {"duration_s": 580, "workload": {"streaming": [{"trace": "proteus", "families": ["resnet"]}]}}
    one = build_workload(scenario_from_data(_base() | long), pm, shared_data)[0].arrivals
    long["workload"]["streaming"][0]["rate_scale"] = 2.0
    two = build_workload(scenario_from_data(_base() | long), pm, shared_data)[0].arrivals
    assert len(two) == pytest.approx(2 * len(one), rel=0.05)
    assert np.all(np.diff(two) >= 0) and two[-1] < 580
    spec = a[0].spec
    assert spec.kind == "streaming" and spec.slo_ms == 300 and spec.accuracy_floor == pytest.approx(
        pm.best_accuracy("resnet") - 0.04)


def test_batch_jobs_from_job_traces(shared_data):
    pm = PerformanceModel(shared_data)
    for trace in ("philly", "alibaba"):
        sc = scenario_from_data(_base() | {"workload": {"batch": [
            {"trace": trace, "jobs": 5, "families": ["bert", "resnet"], "slo_ms": 1000, "max_items": 3000}]}})
        jobs = build_workload(sc, pm, shared_data)
        assert len(jobs) == 5
        assert all(j.spec.kind == "batch" and 1 <= j.spec.items <= 3000 for j in jobs)
        assert all(0 <= j.submit_s <= sc.duration_s / 2 + 1e-9 for j in jobs)
        assert [j.spec.family for j in jobs][:2] == ["bert", "resnet"]


def test_unknown_family_is_a_clear_error(shared_data):
    pm = PerformanceModel(shared_data)
    sc = scenario_from_data(_base() | {"workload": {"streaming": [{"trace": "proteus", "families": ["llama"]}]}})
    with pytest.raises(ConfigError, match="llama"):
        build_workload(sc, pm, shared_data)
