"""The held-out-accelerator benchmark's reference rules (``benchmarks/heldout_accelerator.py``): the ratio rule's
average over the training ratios is what separates it from a mean-based correction on bimodal ratios."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.heldout_accelerator import ANCHOR, TARGET, ratio_rule_predictions
from oltunes.types import Candidate, Variant


def _row(acc: str, name: str, batch: int, ms: float) -> tuple[Candidate, float]:
    v = Variant(family="f", name=name, size=name, accuracy=0.9)
    return Candidate(pool=acc, accelerator=acc, variant=v, batch_size=batch), ms


def test_median_ratio_follows_the_majority_mode_and_the_mean_falls_between():
    # seven variants 1.5x slower on the target, three (compute-bound) 4x faster: bimodal log ratios
    ratios = [1.5] * 7 + [0.25] * 3
    rows = [_row(ANCHOR, f"v{i}", 1, 10.0 + i) for i in range(11)]
    rows += [_row(TARGET, f"v{i}", 1, (10.0 + i) * r) for i, r in enumerate(ratios)]
    rows.append(_row(TARGET, "v10", 1, 20.0 * 1.5))  # held out: a majority-mode variant
    train = list(range(len(rows) - 1))
    test = [len(rows) - 1]
    median = ratio_rule_predictions(rows, train, test)
    mean = ratio_rule_predictions(rows, train, test, np.mean)
    assert math.isclose(median[0], 30.0, rel_tol=1e-9)
    want_mean = 20.0 * math.exp((7 * math.log(1.5) + 3 * math.log(0.25)) / 10)
    assert math.isclose(mean[0], want_mean, rel_tol=1e-9) and mean[0] < 0.6 * 30.0
