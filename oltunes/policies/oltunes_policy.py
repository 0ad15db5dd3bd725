"""`oltunes`: the real Tuner (FM-FTML learner + grouping), starting cold, learning from simulated measurements.

Two registered flavours, the same tuner code, differing only in the cold-start prior (issue 3: "a documented
prior, e.g. a profile table the user supplies"):

* ``oltunes`` — the tuner's default rule-of-thumb prior (``Prior.make("heuristic")``); it knows nothing of the
  simulated hardware before its first measurement;
* ``oltunes-profiled`` — a ``ProfilePrior`` built from the *same offline profile* the ``static-profile`` and
  ``gavel-like`` baselines read (isolated, noiseless p99 batch latency and busy energy per item, concurrency 1,
  no co-runner): what a profiling run of the zoo ahead of time gives. Interference, concurrency, load,
  queueing, drift and noise are still learned online from measurements only.

Both ask their decisions for trials (``JobSpec.trials``): two for a stream (one of them run as a shadow of a share
of its requests), two for a batch job of ``PROBE_MIN_ITEMS`` items or more at its first placement (run as probe shards);
where they run, their measurements (``purpose`` shadow / probe) teach the tuner pairs it would otherwise learn only
by giving them a real job (``trials=False``: none; `oltunes.sim.exploration` runs them in the simulator).

Both pass the job's current placement on as ``current=`` when re-decided, so staying is one of the candidates and
is preferred while near-best. Both are re-decided once right after a job's first measurement (``retunes_early``):
a cold start is a guess from the prior, and the first measurement (one control interval) already corrects it by
far more than the measurement noise, so waiting a whole re-tune interval (3-6 control intervals in the shipped
scenarios) on a wrong guess only adds violations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from oltunes.errors import MissingDependency
from oltunes.policies.base import Policy, PolicyContext
from oltunes.profiles import Profile
from oltunes.trusted import trusted_model
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement

if TYPE_CHECKING:
    from oltunes.tuner.protocol import TunerLike


def _has_free_slot(state: ClusterState) -> bool:
    """Some pool has a free slot (one pass over the placements, not one per pool)."""
    # Fewer placements than slots in all: some pool has one free (no need to count by pool).
    if sum(p.count * p.slots_per_device for p in state.pools) > len(state.placements):
        return True
    used = Counter(pl.pool for pl in state.placements)
    return any(p.count * p.slots_per_device - used[p.name] > 0 for p in state.pools)


STREAM_TRIALS = 2  # a stream's decisions ask for two trials (one runs as a shadow, on a device in use if it can)
BATCH_TRIALS = 2  # a large batch job's first decision asks for two (probe shards)
PROBE_MIN_ITEMS = 2000  # a batch job this large or larger is probed (1.5 % of it: at least 30 items a shard)


class OLTunesPolicy(Policy, name="oltunes"):
    adaptive = True
    learns = True
    retunes_early = True
    explores = True
    prior_kind = "heuristic"

    def __init__(self, ctx: PolicyContext, trials: bool = True, **tuner_kwargs) -> None:
        """``trials``: ask decisions for candidates to try (shadows, probe shards; module docstring)."""
        super().__init__(ctx)
        self.trials = trials
        try:  # the learner's package; imported lazily so the baselines never need it
            from oltunes.tuner import Tuner
            from oltunes.tuner.model.prior import Prior
        except ImportError as e:
            raise MissingDependency(f"policy 'oltunes' needs the tuner package: {e}") from e

        self.tuner: TunerLike
        if self.prior_kind == "heuristic" and ctx.tuner is not None and not tuner_kwargs:
            self.tuner = ctx.tuner  # the one given: e.g. a flow's (its saved state, or the tuning service)
            return
        if "prior" not in tuner_kwargs and self.prior_kind == "profile":
            tuner_kwargs["prior"] = Prior.make("profile", rows=self.profile_rows())
        self.tuner = Tuner(
            list(ctx.variants),
            batch_sizes=ctx.batch_sizes,
            concurrencies=ctx.concurrencies,
            seed=ctx.seed,
            **tuner_kwargs,
        )

    @property
    def profile_table(self) -> Profile:
        """The table ``profile_rows`` reads: the public one (what a user can know)."""
        return self.ctx.profile

    def profile_rows(self) -> list[dict]:
        """The offline profile table (every variant x accelerator type x batch size), as ProfilePrior rows:
        isolated, noiseless p99 batch latency and busy energy per item at concurrency 1."""
        prof, vs, rows = self.profile_table, list(self.ctx.variants), []
        isolated = JobSpec(family="any", slo_ms=1.0)  # a batch job alone on its device: no load, no co-runner
        for acc in prof.accelerators():
            g = prof.grid(isolated, acc, vs, self.ctx.batch_sizes, (1,))
            for i, v in enumerate(vs):
                for j, b in enumerate(g.batches):
                    rows.append({"accelerator": acc, "variant": v.name, "batch_size": int(b),
                                 "latency_ms": float(g.p99_batch_ms[i, j, 0]),
                                 "energy_j_per_item": float(g.energy_j_per_item[i, j, 0])})
        return rows

    def decide(self, job: JobSpec, state: ClusterState, current: Placement | None = None) -> Decision | None:
        if current is None and not _has_free_slot(state):
            return None
        n = self.trials_for(job, current) if self.trials else 0
        if n != job.trials:  # (as `JobSpec.model_copy` would leave it, without its cost: one per decision)
            job = trusted_model(JobSpec, {**job.__dict__, "trials": n}, job.__pydantic_fields_set__ | {"trials"})
        return self.tuner.decide(job, state, current)

    @staticmethod
    def trials_for(job: JobSpec, current: Placement | None) -> int:
        """How many trials to ask for: two for a stream at every decision (one may become a shadow), two probe
        shards for a batch job of ``PROBE_MIN_ITEMS`` or more at its first placement, none otherwise."""
        if job.kind == "streaming":
            return STREAM_TRIALS
        return BATCH_TRIALS if current is None and job.items >= PROBE_MIN_ITEMS else 0

    def observe(self, m: Measurement) -> None:
        self.tuner.observe(m)

    def observe_many(self, ms: Sequence[Measurement]) -> None:
        self.tuner.observe_many(ms)


class OLTunesProfiled(OLTunesPolicy, name="oltunes-profiled"):
    """``oltunes`` with the offline profile table as its cold-start prior (module docstring)."""

    needs_profile = True
    prior_kind = "profile"
