"""The estimator's learn side: a measurement becomes a learning row (features, log residuals over the prior), a
chunk of rows updates the pooled correction once, then the FM learns each row's residual against that fit, and the
margins' residual quantiles take the errors of the predictions made before learning (progressive validation).
A mixin of :class:`~oltunes.tuner.model.estimate.Estimator` (its prior table, correction, FM, residuals and job memory).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from oltunes.errors import DataError
from oltunes.learner.features import encode, job_context
from oltunes.types import Candidate, Measurement

__all__ = ["EN", "LAT", "LEARN_CHUNK", "TARGETS", "THR", "EstimatorLearning"]

TARGETS = ("log_latency", "log_energy", "log_throughput")
LAT, EN, THR = 0, 1, 2
# Measurements learnt together (``learn_many``) per fit of the pooled correction. Larger chunks drift from what one
# by one learns, the more the larger: a10-l4-wide's (benchmarks/heldout) mean cold violations over seeds 0-7 were
# 0.696 with whole control intervals (~28 measurements) per fit, 0.678 with 10, 0.661 with 6, 0.643 with 4, 0.639
# one by one. 4 costs 1.5x less observe CPU than one by one (whole intervals: ~3x).
LEARN_CHUNK = 4


class EstimatorLearning:
    """Learning from measurements (needs :class:`~oltunes.tuner.model.estimate.Estimator`'s state)."""

    def learn(self, m: Measurement) -> None:
        """Learn from one measurement (the caller guarantees exactly-once)."""
        self.learn_many([m])

    def learn_many(self, ms: Sequence[Measurement]) -> None:
        """Learn from several measurements (the caller guarantees exactly-once), ``LEARN_CHUNK`` at a time: the
        pooled correction takes a chunk's and is fitted once, then the FM learns each one's residual against that
        fit, in order. Refuses them all (``DataError``, nothing learnt) if one has a non-finite value."""
        rows = [self._learning_row(m) for m in ms]
        for i in range(0, len(rows), LEARN_CHUNK):
            self._learn_rows(rows[i:i + LEARN_CHUNK])

    def _learn_rows(self, rows: list[tuple]) -> None:
        """``learn_many`` of measurements' learning rows (``_learning_row``), fitted once."""
        corr = self.correction  # the FM learns what the pooled correction leaves once updated
        before, after = corr.learn_many([
            (c.accelerator, c.variant, c.batch_size, c.concurrency, [v or 0.0 for v in ys], measured,
             None if corr.has(c.accelerator, c.variant, c.batch_size, c.concurrency)  # (read for a new one only)
             else self.priors.growth(c.accelerator, c.variant, c.batch_size), m.kind != "streaming")
            for m, c, _, ys, measured in rows])
        # per target in Python floats (a handful of targets: cheaper than numpy's scalars)
        learn, residuals = self.model.learn_predict, [self.residuals[t] for t in TARGETS]
        for (m, c, x, ys, measured), corr_before, corr_after in zip(rows, before.tolist(), after.tolist()):
            fm_before = learn(x, np.array([0.0 if v is None else v - a for v, a in zip(ys, corr_after)]),
                              np.array(measured)).tolist()
            acc = c.accelerator
            region = f"{acc}/{c.variant.family}"
            for res, v, b, f in zip(residuals, ys, corr_before, fm_before):
                if v is not None:  # progressive validation: the error of the prediction made before learning
                    err = v - b - f
                    res.update(acc, err)
                    res.update(region, err)
            key = f"{acc}/{c.variant.name}"
            self.visits[key] = self.visits.get(key, 0) + 1
            self.jobs.learn(m)
            self.n_learned += 1

    def _learning_row(self, m: Measurement) -> tuple[Measurement, Candidate, dict[str, float], list[float | None],
                                                     list[bool]]:
        """A measurement's candidate, features, log residuals over the prior per target (``TARGETS`` order; None: not
        measured) and which targets were measured."""
        c = m.candidate
        ctx = job_context(m)
        x = encode(ctx, c)
        prior = self.priors.log(c, ctx).tolist()  # Python floats: the same values, cheaper arithmetic
        capacity = m.throughput_items_per_s > 0 and (
            m.kind != "streaming" or (m.gpu_util is not None and m.gpu_util >= self.saturated_util))
        ys = [math.log(m.latency_p99_ms) - prior[LAT] if m.latency_p99_ms > 0 else None,
              math.log(m.energy_j_per_item) - prior[EN] if m.energy_j_per_item > 0 else None,
              math.log(m.throughput_items_per_s) - prior[THR] if capacity else None]
        # Last line of defence (types already refuse NaN/inf): one non-finite value would poison the model.
        if not (all(map(math.isfinite, x.values())) and all(v is None or math.isfinite(v) for v in ys)):
            bad = [k for k, v in (*x.items(), *zip(TARGETS, ys)) if v is not None and not math.isfinite(v)]
            raise DataError(f"measurement {m.measurement_id}: non-finite {', '.join(bad)}; not learnt")
        return m, c, x, ys, [v is not None for v in ys]
