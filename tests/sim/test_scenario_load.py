"""The load rule (``benchmarks/scenario_load``, docs/simulator.md): the fluid load is what a split of the work over
the pools can reach at best, and the shipped scenarios load their cluster as their descriptions say."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.scenario_load import CLASSES, SCENARIO_CLASS, Load, fluid_rho, verdict
from oltunes.sim.scenario import load_scenario, shipped


def test_fluid_load_splits_work_to_balance_the_pools():
    # two jobs, each 1 device-second/s on pool A or 2 on pool B; A has 1 device, B has 2: best is one job on each
    # pool at load 1 (A: 1/1, B: 2/2), where both on A would be 2
    d = np.array([[1.0, 2.0], [1.0, 2.0]])
    assert fluid_rho(d, np.array([1.0, 2.0])) == pytest.approx(1.0, abs=1e-6)
    # a job that fits nowhere but A must go to A
    d = np.array([[1.0, np.inf], [1.0, 2.0]])
    assert fluid_rho(d, np.array([1.0, 2.0])) == pytest.approx(1.0, abs=1e-6)
    # nothing to do, no load
    assert fluid_rho(np.zeros((2, 2)), np.array([1.0, 1.0])) == 0.0


def test_every_shipped_scenario_has_a_load_class():
    assert set(shipped()) <= set(SCENARIO_CLASS)
    assert set(SCENARIO_CLASS.values()) <= set(CLASSES)


@pytest.mark.parametrize("name", ["light", "overloaded"])
def test_shipped_scenario_loads_its_cluster_as_described(shared_data, name):
    load = Load(load_scenario(name))
    m = load.summary()
    assert verdict(SCENARIO_CLASS[name], m) == "ok", m
    # the load rises with the streams' rates: a third of the rate is no longer in the same band
    assert load.summary(1 / 3)["load_mean"] < m["load_mean"]
    assert verdict(SCENARIO_CLASS[name], load.summary(1 / 3)) == "off"


def test_shift_is_harder_after_its_event(shared_data):
    m = Load(load_scenario("shift")).summary()
    assert m["load_after_event"] > 1.3 * m["load_before_event"]
