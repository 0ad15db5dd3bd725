"""`oltunes`: the real Tuner (FM-FTML learner + grouping), starting cold, learning from simulated measurements.

Two registered flavours, the same tuner code, differing only in the cold-start prior (issue 3: "a documented
prior, e.g. a profile table the user supplies"):

* ``oltunes`` — the tuner's default rule-of-thumb prior (``Prior.make("heuristic")``); it knows nothing of the
  simulated hardware before its first measurement;
* ``oltunes-profiled`` — a ``ProfilePrior`` built from the *same offline profile* the ``static-profile`` and
  ``gavel-like`` baselines read (isolated, noiseless p99 batch latency and busy energy per item, concurrency 1,
  no co-runner): what a profiling run of the zoo ahead of time gives. Interference, concurrency, load,
  queueing, drift and noise are still learned online from measurements only.

Both pass the job's current placement as ``current=`` when re-tuning (the engine names it in
``SimCluster.retuning``), so staying is one of the candidates and is preferred while near-best.
"""

from __future__ import annotations

import numpy as np

from oltunes.errors import MissingDependency
from oltunes.policies.base import Policy, PolicyContext
from oltunes.sim import calibration as cal
from oltunes.sim.cluster import SimCluster
from oltunes.types import Decision, JobSpec, Measurement


class OLTunesPolicy(Policy, name="oltunes"):
    adaptive = True
    learns = True
    prior_kind = "heuristic"

    def __init__(self, ctx: PolicyContext, **tuner_kwargs) -> None:
        super().__init__(ctx)
        try:  # the learner's package; imported lazily so the baselines never need it
            from oltunes.tuner import Tuner
            from oltunes.tuner.prior import Prior
        except ImportError as e:
            raise MissingDependency(f"policy 'oltunes' needs the tuner package: {e}") from e

        if "prior" not in tuner_kwargs and self.prior_kind == "profile":
            tuner_kwargs["prior"] = Prior.make("profile", rows=self.profile_rows())
        self.tuner = Tuner(
            list(ctx.variants),
            batch_sizes=ctx.batch_sizes,
            concurrencies=ctx.concurrencies,
            seed=ctx.seed,
            **tuner_kwargs,
        )

    def profile_rows(self) -> list[dict]:
        """The offline profile table (every variant x accelerator type x batch size), as ProfilePrior rows."""
        m = self.ctx.model
        rows = []
        for v in self.ctx.variants:
            vi = m.variant_index(v.name)
            for acc in cal.FACTORS:
                lat = m.latency_row(vi, acc)
                sig = m.sigma(vi, acc)
                for b in self.ctx.batch_sizes:
                    bb = min(b, cal.MAX_BATCH)
                    mean = float(lat[bb]) * float(np.exp(sig**2 / 2))
                    rows.append({"accelerator": acc, "variant": v.name, "batch_size": b,
                                 "latency_ms": self.profile_p99_ms(v, acc, bb),
                                 "energy_j_per_item": m.busy_power_w(vi, acc, bb) * mean / 1000.0 / b})
        return rows

    def decide(self, job: JobSpec, cluster: SimCluster) -> Decision | None:
        if cluster.free_slots_total() == 0:
            return None
        current = cluster.retuning if cluster.retuning is not None and cluster.retuning.job_id == job.job_id else None
        return self.tuner.recommend(job, cluster.state(), current=current)

    def observe(self, m: Measurement) -> None:
        self.tuner.observe(m)


class OLTunesProfiled(OLTunesPolicy, name="oltunes-profiled"):
    """``oltunes`` with the offline profile table as its cold-start prior (module docstring)."""

    prior_kind = "profile"
