"""Residual-quantile margins: shrink towards the prior when data is scarce, follow drift through the window."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oltunes.learner.uncertainty import ResidualQuantiles


def test_margin_moves_from_prior_to_measured_quantile():
    rq = ResidualQuantiles(q=0.9, window=500, prior_weight=5)
    assert rq.margin("t4", prior=1.0) == 1.0
    rng = np.random.default_rng(0)
    rq.update("t4", 0.1)
    one = rq.margin("t4", prior=1.0)
    assert 0.1 < one < 1.0  # one residual barely moves it
    for r in rng.normal(0, 0.1, 400):
        rq.update("t4", r)
    assert rq.margin("t4", prior=1.0) == pytest.approx(np.quantile(np.abs(rng.normal(0, 0.1, 100_000)), 0.9), rel=0.2)
    assert rq.margin("cpu", prior=0.7) == 0.7  # regions are independent


def test_window_forgets_old_errors():
    rq = ResidualQuantiles(q=0.95, window=50, prior_weight=0)
    for _ in range(50):
        rq.update("a", 2.0)
    for _ in range(50):
        rq.update("a", 0.01)
    assert rq.margin("a", prior=1.0) == pytest.approx(0.01)


def test_json_round_trip():
    rq = ResidualQuantiles(q=0.9, window=10)
    for r in (0.1, -0.3, 0.2):
        rq.update("x", r)
    again = ResidualQuantiles.from_state_dict(json.loads(json.dumps(rq.state_dict())))
    assert again.margin("x", 0.5) == rq.margin("x", 0.5)
