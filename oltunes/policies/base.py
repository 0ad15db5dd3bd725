"""The placement-policy interface: one decision method, registered by name (``Policy.make("round-robin", ...)``).

Every policy gets the same context at construction (the variants, the batch sizes and concurrencies the scenario
allows, a seed, the public profile table ``model`` — what a user can know, read by ``static-profile``,
``gavel-like`` and ``oltunes-profiled`` — and the simulator's ``truth``, which differs from the table by a seeded
per-(variant, accelerator) factor and drifts with the scenario's events: only ``oracle`` may read it) and answers :meth:`Policy.decide` with a ``Decision`` (or ``None`` = wait for capacity).
The engine enforces capacity; policies must also respect the job's accuracy floor (checked by the invariant test).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from oltunes.registry import Registered
from oltunes.sim.cluster import SimCluster
from oltunes.sim.perfmodel import Z99, PerformanceModel
from oltunes.types import (
    Candidate,
    ColocationGroup,
    Decision,
    DecisionSource,
    Explanation,
    JobSpec,
    Measurement,
    Prediction,
    Variant,
)


@dataclass(frozen=True)
class PolicyContext:
    """What every policy is built with."""

    model: PerformanceModel  # the public profile table
    variants: tuple[Variant, ...]
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    concurrencies: tuple[int, ...] = (1, 2, 3, 4)
    seed: int = 0
    # job id -> future request arrivals (s): the oracle's clairvoyance; no other policy may read it
    arrivals: Mapping[str, object] = field(default_factory=dict)
    horizon_s: float = 30.0  # how far ahead the oracle looks (the re-tune interval)
    truth: PerformanceModel | None = None  # the simulator's physics; only the oracle may read it (None = the table)

    @property
    def true_model(self) -> PerformanceModel:
        return self.truth if self.truth is not None else self.model


class Policy(Registered, root=True):
    """Base class: subclasses implement :meth:`decide`; adaptive ones are re-asked every re-tune interval."""

    adaptive: ClassVar[bool] = False  # re-decided at every re-tune interval (else: placed once, kept)
    learns: ClassVar[bool] = False  # wants a Measurement per job per control interval

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx
        self.rng = np.random.default_rng(ctx.seed)

    def decide(self, job: JobSpec, cluster: SimCluster) -> Decision | None:
        """Where and how to run ``job`` now; ``None`` when it should wait for capacity."""
        raise NotImplementedError

    def observe(self, m: Measurement) -> None:
        """A measurement of a job this policy placed (only called when ``learns``)."""

    # ------------------------------------------------------------------ helpers shared by the baselines
    def eligible(self, job: JobSpec) -> list[Variant]:
        """The job's family variants meeting its accuracy floor, most accurate first."""
        vs = [v for v in self.ctx.variants if v.family == job.family and v.accuracy >= job.accuracy_floor - 1e-12]
        return sorted(vs, key=lambda v: -v.accuracy)

    def default_variant(self, job: JobSpec) -> Variant | None:
        """The model a user submits without variant selection: the family's most accurate one."""
        vs = self.eligible(job)
        return vs[0] if vs else None

    @staticmethod
    def decision(
        job: JobSpec,
        cluster: SimCluster,
        pool: str,
        device: int,
        variant: Variant,
        batch: int,
        concurrency: int = 1,
        *,
        predicted: Prediction | None = None,
        source: DecisionSource = "policy",
        note: str = "",
    ) -> Decision:
        """Build a Decision for one device of one pool (co-runners filled in from the cluster)."""
        acc = cluster.pool(pool).accelerator.name
        cand = Candidate(
            pool=pool,
            accelerator=acc,
            variant=variant,
            batch_size=batch,
            concurrency=concurrency,
            co_runners=cluster.co_runners(pool, device, exclude=job.job_id),
        )
        group = ColocationGroup(pool=pool, device=device, members=(job.job_id, *cluster.members(pool, device)))
        pred = predicted or Prediction(latency_p99_ms=0.0, energy_j_per_item=0.0, throughput_items_per_s=0.0)
        return Decision(
            job_id=job.job_id,
            candidate=cand,
            group=group,
            source=source,
            explanation=Explanation(predicted=pred, n_candidates=1, n_feasible=1, note=note),
        )

    def profile_p99_ms(self, variant: Variant, accelerator: str, batch: int) -> float:
        """Offline profile: isolated, noiseless p99 batch latency (what a profiling run ahead of time gives)."""
        m = self.ctx.model
        vi = m.variant_index(variant.name)
        return float(m.latency_row(vi, accelerator)[batch]) * float(np.exp(Z99 * m.sigma(vi, accelerator)))


class FixedConfigPolicy(Policy):
    """Baselines without variant or batch selection: the family's most accurate variant at a fixed batch size.

    Subclasses only say *where*: :meth:`place` returns ``(pool, device)`` or ``None`` to wait for capacity.
    """

    def __init__(self, ctx: PolicyContext, batch_size: int = 4) -> None:
        super().__init__(ctx)
        self.batch = min(ctx.batch_sizes, key=lambda b: abs(b - batch_size))

    def place(self, job: JobSpec, cluster: SimCluster) -> tuple[str, int] | None:
        raise NotImplementedError

    def decide(self, job: JobSpec, cluster: SimCluster) -> Decision | None:
        variant = self.default_variant(job)
        where = None if variant is None else self.place(job, cluster)
        if where is None:
            return None
        return self.decision(job, cluster, where[0], where[1], variant, self.batch)
