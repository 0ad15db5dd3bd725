"""``benchmarks/violation_sources.py``: every measured interval is paired with the decision in force for its job."""

from __future__ import annotations

import math

import pytest

from benchmarks.violation_sources import run, summarise


def test_summary_shares_add_up_and_families_count_violations():
    intervals = [("model", False, 0.1, 900.0, True, "gpt2"), ("model", False, 0.2, 250.0, False, "gpt2"),
                 ("model", True, 0.5, 400.0, True, "t5"), ("prior", True, math.nan, 100.0, False, "t5")]
    s = summarise(intervals)
    assert s["model, infeasible"]["intervals"] == 2 and s["model, infeasible"]["violating"] == 1
    assert sum(v["share_of_violating"] for k, v in s.items() if not k.startswith("_")) == pytest.approx(1.0)
    assert s["model, infeasible"]["log_err_median"] == pytest.approx(0.15)
    assert math.isnan(s["prior, feasible"]["log_err_median"])  # no finite error: none reported
    assert s["_violating_by_family"] == {"gpt2": 1, "t5": 1}


def test_a_run_pairs_measurements_with_the_decisions_that_made_them(shared_data):
    intervals = run("tiny", 0, "oltunes")
    assert len(intervals) > 20
    assert {x[0] for x in intervals} <= {"model", "prior", "explore"}
    # the predicted batch p99 behind each interval is the tuner's: a learnt model is off by far less than its prior
    errs = [abs(x[2]) for x in intervals if x[0] == "model" and math.isfinite(x[2])]
    prior = [abs(x[2]) for x in intervals if x[0] == "prior" and math.isfinite(x[2])]
    assert errs and prior and sorted(errs)[len(errs) // 2] < sorted(prior)[len(prior) // 2]
