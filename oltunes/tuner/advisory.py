"""Advisory mode: the tuner decides and is recorded, its baseline runs (``docs/decisions.md``, *Advisory mode*).

`AdvisoryTuner` is a `TunerLike` that answers every ``decide`` with its baseline's decision (what the job would
run on without the tuner: a placement policy, `ADVISORY_BASELINE` unless the flow names another) carrying the
tuner's own decision as ``Decision.advice``: the candidate it would have chosen, its prediction, the tuner's
prediction for what really ran and the predicted saving on the job's objective. Nothing the tuner says changes
where or how a job runs. Measurements of what ran are observed by the tuner: learning from them is safe (they
are what the baseline would have measured anyway) and is what a team watching the tuner wants to see improve.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from oltunes.errors import ConfigError
from oltunes.tuner.protocol import TunerLike
from oltunes.types import (Advice, Candidate, ClusterState, Decision, JobSpec, Measurement, Placement, Prediction,
                           Variant)

__all__ = ["ADVISORY_BASELINE", "AdvisoryTuner", "baseline_policy"]

log = logging.getLogger(__name__)

# What runs in advisory mode when nothing else is named: the family's most accurate variant at a fixed batch
# size on the least-loaded device, the configuration a team runs without a tuner (it needs no profile table).
ADVISORY_BASELINE = "least-loaded"

# objective -> (its quantity from a prediction, what it is); None: not comparable from predictions alone
_QUANTITY: dict[str, tuple[Callable[[JobSpec, Prediction], float | None], str]] = {
    "energy": (lambda job, p: p.energy_j_per_item, "energy per item (J/item)"),
    "completion_time": (lambda job, p: job.items / p.throughput_items_per_s
                        if job.items and p.throughput_items_per_s > 0 else None, "time for the job (s)"),
}


def baseline_policy(name: str, variants: Sequence[Variant], profile: Any = None) -> TunerLike:
    """The placement policy `name` behind `TunerLike`, what a flow's ``policy`` runs (an unknown name, or a
    missing profile, raises naming it)."""
    from oltunes.policies import Policy, PolicyContext
    from oltunes.policies.base import PolicyAsTuner

    if name == "oltunes":
        raise ConfigError("baseline policy: 'oltunes' is the tuner itself; name a policy that runs without it")
    return PolicyAsTuner(Policy.make(name, ctx=PolicyContext(profile=profile, variants=tuple(variants))))


class AdvisoryTuner:
    """`tuner` decides and learns, `baseline` places: see the module's text."""

    def __init__(self, tuner: TunerLike, baseline: TunerLike,
                 predict: Callable[[JobSpec, Sequence[Candidate]], list[Prediction]] | None = None) -> None:
        self.tuner = tuner
        self.baseline = baseline
        self.predict = predict  # the tuner's prediction for given candidates (None: a client, which has none)

    # what the tuning service asks of the tuner it serves besides `TunerLike`
    @property
    def variants(self) -> list[Variant]:
        return self.tuner.variants

    def has_seen(self, measurement_id: str) -> bool:
        return self.tuner.has_seen(measurement_id)

    def state_dict(self) -> dict[str, Any]:
        return self.tuner.state_dict()

    @property
    def n_observed(self) -> int | None:
        return self.tuner.n_observed

    def decide(self, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
        ran = self.baseline.decide(job, cluster, current)
        try:
            mine = self.tuner.decide(job, cluster, current)
        except Exception:  # the tuner's failure never stops the job: it runs its baseline either way
            log.exception("advisory: the tuner could not decide job %s; it runs its baseline without advice",
                          job.job_id)
            return ran
        advice = self._advice(job, mine, ran.candidate)
        log.info("advisory: job %s runs %s; the tuner would have chosen %s (predicted saving %s %s)", job.job_id,
                 ran.candidate.key, advice.candidate_key, advice.predicted_saving, advice.ranked_on)
        return ran.model_copy(update={"advice": advice})

    def _advice(self, job: JobSpec, mine: Decision, ran: Candidate) -> Advice:
        predicted = mine.explanation.predicted
        ran_predicted, saving, ranked_on = None, None, ""
        if self.predict is not None:
            ran_predicted, own = self.predict(job, [ran, mine.candidate])
            quantity, ranked_on = _QUANTITY.get(job.objective, (None, ""))
            if quantity is not None:
                a, b = quantity(job, ran_predicted), quantity(job, own)
                saving = None if a is None or b is None else a - b
        return Advice(decision_id=mine.decision_id, candidate_key=mine.candidate.key, source=mine.source,
                      predicted=predicted, ran_predicted=ran_predicted, ranked_on=ranked_on, predicted_saving=saving)

    def expect(self, job: JobSpec, cluster: ClusterState) -> Prediction:
        """The baseline's prediction for where it puts the job (what the lease queue plans with: what runs)."""
        return self.baseline.expect(job, cluster)

    def observe(self, m: Measurement) -> bool:
        return self.tuner.observe(m)

    def observe_many(self, ms: Sequence[Measurement]) -> list[bool]:
        return self.tuner.observe_many(ms)

    def add_variants(self, variants: Iterable[Variant]) -> int:
        return self.tuner.add_variants(variants)

    def save(self, *args: Any) -> Path | None:
        return self.tuner.save(*args)

