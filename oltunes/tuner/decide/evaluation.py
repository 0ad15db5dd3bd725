"""A job's candidates on a cluster scored, ready for the selection: steps 1-4 of a decision (`oltunes.tuner.tuner`).

The placement options (`candidates.placement_options` over the cluster's `oltunes.occupancy.Occupancy`), every
candidate's estimate (`estimate.Estimator`), the constraints' verdict (`constraints.Verdict`) and the objective's
values (`objectives`).

The last options are kept while the next decision sees the very same pool and placement objects (compared by
identity, element by element) and the model has not moved: a long-lived caller (the simulator, an in-process user)
asks again and again about one cluster, and regrouping 2,500 placements was half of a decision at 10,000 devices.
A caller that sends new objects every time (the HTTP service) has its options built afresh.
"""

from __future__ import annotations

from operator import is_

import numpy as np

from oltunes.errors import ConfigError
from oltunes.occupancy import Occupancy
from oltunes.tuner.decide.candidates import PlacementOption, placement_options
from oltunes.tuner.catalogue import Catalogue
from oltunes.tuner.decide.constraints import Constraint, Verdict
from oltunes.tuner.model.estimate import Estimate, Estimator
from oltunes.tuner.decide.objectives import Objective, objective_for
from oltunes.types import ClusterState, JobSpec, Placement

__all__ = ["Evaluation", "Evaluator"]

Evaluation = tuple[Estimate, Verdict, Objective, np.ndarray]  # (estimate, verdict, objective, its values)


class Evaluator:
    """``evaluate(job, cluster, current)``: the job's candidates on ``cluster`` scored (an `Evaluation`)."""

    def __init__(self, catalogue: Catalogue, estimator: Estimator, constraints: dict[str, Constraint]) -> None:
        self.catalogue, self.estimator, self.constraints = catalogue, estimator, constraints
        self._last: tuple | None = None  # (key, pools, placements, (options, no_capacity)) of the last decision

    def evaluate(self, job: JobSpec, cluster: ClusterState, current: Placement | None) -> Evaluation:
        return self.score(job, *self.options_for(job, cluster, current))

    def options_for(self, job: JobSpec, cluster: ClusterState,
                    current: Placement | None) -> tuple[list[PlacementOption], bool]:
        """The placement options for ``job`` on ``cluster`` (and whether every device is full)."""
        if not self.catalogue.family(job.family):
            raise ConfigError(f"recommend: no variant of family {job.family!r} in the catalogue; "
                              f"known families: {', '.join(self.catalogue.families()) or '(none)'}")
        if not cluster.pools:
            raise ConfigError("recommend: the cluster has no pools")
        # a re-tuned job's own entry, if the cluster still lists it, is ignored (its slot is the job's own)
        exclude = job.job_id if current is not None else None
        include = (current.pool, current.device) if current is not None else None
        # (the members' loads move with observations, the options' figures with the catalogue)
        key = (exclude, include, self.estimator.n_learned, self.catalogue.version)
        last = self._last
        if last is not None and last[0] == key and _same(last[1], cluster.pools) and _same(last[2], cluster.placements):
            return last[3]
        occupancy = Occupancy(cluster, exclude=exclude)
        options = placement_options(occupancy, include=include, load_of=self.estimator.load_of), False
        if not options[0]:  # no free slot anywhere: every pool's least-loaded device, to name the best available
            options = placement_options(occupancy, ignore_capacity=True, load_of=self.estimator.load_of), True
        self._last = (key, tuple(cluster.pools), tuple(cluster.placements), options)
        return options

    def score(self, job: JobSpec, options: list[PlacementOption], no_capacity: bool) -> Evaluation:
        est = self.estimator.estimate(job, options, self.catalogue.family(job.family), no_capacity)
        verdict = Verdict(self.constraints, est)
        objective = objective_for(job)
        return est, verdict, objective, objective.values(est)


def _same(kept: tuple, now) -> bool:
    """Whether ``now`` holds the very objects of ``kept``, in order."""
    return len(kept) == len(now) and all(map(is_, kept, now))
