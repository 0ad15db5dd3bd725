"""`oltunes`: the real Tuner (FM-FTML learner + grouping), starting cold, learning from simulated measurements."""

from __future__ import annotations

from oltunes.errors import MissingDependency
from oltunes.policies.base import Policy, PolicyContext
from oltunes.sim.cluster import SimCluster
from oltunes.types import Decision, JobSpec, Measurement


class OLTunesPolicy(Policy, name="oltunes"):
    adaptive = True
    learns = True

    def __init__(self, ctx: PolicyContext, **tuner_kwargs) -> None:
        super().__init__(ctx)
        try:  # the learner's package; imported lazily so the baselines never need it
            from oltunes.tuner import Tuner
        except ImportError as e:
            raise MissingDependency(f"policy 'oltunes' needs the tuner package: {e}") from e

        self.tuner = Tuner(
            list(ctx.variants),
            batch_sizes=ctx.batch_sizes,
            concurrencies=ctx.concurrencies,
            seed=ctx.seed,
            **tuner_kwargs,
        )

    def decide(self, job: JobSpec, cluster: SimCluster) -> Decision | None:
        if cluster.free_slots_total() == 0:
            return None
        return self.tuner.recommend(job, cluster.state())

    def observe(self, m: Measurement) -> None:
        self.tuner.observe(m)
