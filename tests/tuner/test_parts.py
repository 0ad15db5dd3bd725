"""The tuner's parts by job: registered objectives and constraints, the explanation built from them, one memo."""

from __future__ import annotations

import numpy as np
import pytest

from oltunes.errors import ConfigError
from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.tuner.decide.constraints import Constraint
from oltunes.tuner.model.memo import Memo
from oltunes.tuner.decide.objectives import Objective, objective_for
from oltunes.types import ClusterState, JobSpec, Pool, Variant

V = [Variant(family="cnn", name=f"cnn-{s}", size=s, accuracy=a, params=p)
     for s, a, p in (("s", 0.70, 5_000_000), ("l", 0.80, 60_000_000))]
CLUSTER = ClusterState(pools=[Pool(name="t4", accelerator=CATALOG["t4"], count=2),
                              Pool(name="cpu", accelerator=CATALOG["cpu"], count=1)])


def test_objectives_and_constraints_are_registered_by_name():
    assert Objective.known() == ["completion_time", "cost", "energy"]
    assert set(Constraint.known()) == {"accuracy", "latency", "throughput", "co-runners", "memory"}
    with pytest.raises(ConfigError, match="known: completion_time, cost, energy"):
        Objective.make("speed")
    # streaming jobs are judged by energy whatever they ask; batch jobs by what they ask
    assert objective_for(JobSpec(family="cnn", kind="streaming", slo_ms=100, objective="cost")).name == "energy"
    assert objective_for(JobSpec(family="cnn", slo_ms=100, objective="cost")).name == "cost"


@pytest.mark.parametrize("objective", ["energy", "completion_time", "cost"])
def test_decision_minimises_the_registered_objective(objective):
    tuner = Tuner(V, seed=0, explore_rate=0.0, near_equal=1e-9)
    job = JobSpec(family="cnn", slo_ms=1e5, items=1000, objective=objective)
    d = tuner.decide(job, CLUSTER)
    # every feasible runner-up loses on that objective, and the explanation ranks on it
    e = d.explanation
    assert e.ranked_on and e.runner_ups
    ranked = [a for a in e.runner_ups[:-1] if a.objective is not None]
    assert ranked and all(a.objective >= e.objective for a in ranked)


def test_explanation_names_the_constraint_from_the_constraint():
    tuner = Tuner(V, seed=0, explore_rate=0.0)
    d = tuner.decide(JobSpec(family="cnn", slo_ms=1e5, accuracy_floor=0.75, items=10), CLUSTER)
    infeasible = d.explanation.runner_ups[-1]
    assert infeasible.reason.startswith("below accuracy floor (0.700 < 0.750)")
    d = tuner.decide(JobSpec(family="cnn", slo_ms=1e-3, items=10), CLUSTER)
    assert not d.feasible and "fails p99 latency SLO (predicted" in d.explanation.note
    assert "0 fail memory" in d.explanation.note


def test_memo_rebuilds_when_its_version_moves_and_stays_bounded():
    version = [0]
    built = []
    memo = Memo(lambda: version[0], max_entries=3)
    for k in range(5):
        memo.get(k, lambda k=k: built.append(k) or k)
    assert len(memo._values) <= 3
    assert memo.get(4, lambda: -1) == 4  # still there: no rebuild
    version[0] += 1
    assert memo.get(4, lambda: -1) == -1
