"""The placement-policy interface: ``decide(job, ClusterState, current=None)`` + ``observe(m)``, registered by name
(``Policy.make("round-robin", ctx=...)``).

Every policy gets the same context at construction: the variants, the batch sizes and concurrencies allowed, a
seed, the public profile table ``profile`` (an ``oltunes.profiles.Profile`` — what a user can know, read by
``static-profile``, ``gavel-like`` and ``oltunes-profiled``), and the ``truth`` (the same interface over the
simulator's physics: the table perturbed per (variant, accelerator) and by drift events; only ``oracle`` may read
it, with the upcoming ``arrivals``). A policy answers :meth:`Policy.decide` with a ``Decision`` (or ``None`` = wait
for capacity); ``current`` is where the job runs now when it is re-decided (its slot already freed in the state).
Policies must respect capacity and the job's accuracy floor (checked by the invariant test over ``Policy.known()``).
Policies import neither the simulator nor the tuner's internals: ``ClusterState`` and ``Profile`` are all they see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from oltunes.errors import ConfigError
from oltunes.occupancy import Occupancy
from oltunes.profiles import Profile
from oltunes.registry import Registered
from oltunes.types import (
    Candidate,
    ClusterState,
    ColocationGroup,
    Decision,
    DecisionSource,
    Explanation,
    JobSpec,
    Measurement,
    Placement,
    Prediction,
    Variant,
)

if TYPE_CHECKING:
    from oltunes.tuner.protocol import TunerLike


def _no_reading(job_id: str) -> float | None:
    return None


def _time_zero() -> float:
    return 0.0


@dataclass(frozen=True)
class PolicyContext:
    """What every policy is built with."""

    profile: Profile | None  # the public profile table (None: there is none, e.g. a real cluster's local pools)
    variants: tuple[Variant, ...]
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    concurrencies: tuple[int, ...] = (1, 2, 3, 4)
    seed: int = 0
    # job id -> future request arrivals (s): the oracle's clairvoyance; no other policy may read it
    arrivals: Mapping[str, object] = field(default_factory=dict)
    horizon_s: float = 30.0  # how far ahead the oracle looks (the re-tune interval)
    # the simulator's physics; only the oracle and the diagnostics that say so may read it (None = the table)
    truth: Profile | None = None
    clock: Callable[[], float] = _time_zero  # the current time (the simulator injects its own)
    # busy share of its device a placed job kept lately, as a cluster monitor reports it (None = no reading)
    monitor: Callable[[str], float | None] = _no_reading
    tuner: TunerLike | None = None  # the tuner ``oltunes`` decides with (None: a fresh in-process one)

    @property
    def true_profile(self) -> Profile:
        return self.truth if self.truth is not None else self.profile


class Policy(Registered, root=True):
    """Base class: subclasses implement :meth:`decide`; adaptive ones are re-asked every re-tune interval."""

    adaptive: ClassVar[bool] = False  # re-decided at every re-tune interval (else: placed once, kept)
    learns: ClassVar[bool] = False  # wants a Measurement per job per control interval
    retunes_early: ClassVar[bool] = False  # adaptive: also re-decided right after a job's first measurement
    needs_profile: ClassVar[bool] = False  # reads a profile table (refused without one)
    explores: ClassVar[bool] = False  # asks its decisions for trials (built with ``trials=False``: it does not)

    def __init__(self, ctx: PolicyContext) -> None:
        if self.needs_profile and ctx.profile is None:
            raise ConfigError(f"policy {self.name!r} needs a profile table; none is known for this cluster "
                              f"(the simulated launcher has one); policies without: "
                              f"{', '.join(n for n in self.known() if not self.lookup(n).needs_profile)}")
        self.ctx = ctx
        self.rng = np.random.default_rng(ctx.seed)

    def decide(self, job: JobSpec, state: ClusterState, current: Placement | None = None) -> Decision | None:
        """Where and how to run ``job`` now; ``None`` when it should wait for capacity."""
        raise NotImplementedError

    def observe(self, m: Measurement) -> None:
        """A measurement of a job this policy placed (only called when ``learns``)."""

    def observe_many(self, ms: Sequence[Measurement]) -> None:
        """Measurements reported together (a control interval's): one ``observe`` each unless a policy learns them
        at once."""
        for m in ms:
            self.observe(m)

    # ------------------------------------------------------------------ helpers shared by the baselines
    def view(self, state: ClusterState) -> Occupancy:
        """Occupancy of ``state``; co-runner loads from the monitor (1.0 = assume busy when it has no reading)."""
        monitor = self.ctx.monitor

        def load_of(pl: Placement) -> float:
            x = monitor(pl.job_id)
            return 1.0 if x is None else x
        return Occupancy(state, load_of)

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
        cluster: Occupancy,
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
        members = tuple(pl.job_id for pl in cluster.members(pool, device) if pl.job_id != job.job_id)
        group = ColocationGroup(pool=pool, device=device, members=(job.job_id, *members))
        pred = predicted or Prediction(latency_p99_ms=0.0, energy_j_per_item=0.0, throughput_items_per_s=0.0)
        return Decision(
            job_id=job.job_id,
            candidate=cand,
            group=group,
            source=source,
            explanation=Explanation(predicted=pred, n_candidates=1, n_feasible=1, note=note),
        )


class FixedConfigPolicy(Policy):
    """Baselines without variant or batch selection: the family's most accurate variant at a fixed batch size.

    Subclasses only say *where*: :meth:`place` returns ``(pool, device)`` or ``None`` to wait for capacity.
    """

    def __init__(self, ctx: PolicyContext, batch_size: int = 4) -> None:
        super().__init__(ctx)
        self.batch = min(ctx.batch_sizes, key=lambda b: abs(b - batch_size))

    def place(self, job: JobSpec, cluster: Occupancy) -> tuple[str, int] | None:
        raise NotImplementedError

    def decide(self, job: JobSpec, state: ClusterState, current: Placement | None = None) -> Decision | None:
        variant = self.default_variant(job)
        cluster = self.view(state)
        where = None if variant is None else self.place(job, cluster)
        if where is None:
            return None
        return self.decision(job, cluster, where[0], where[1], variant, self.batch)


class PolicyAsTuner:
    """A placement policy behind `oltunes.tuner.protocol.TunerLike`, so that a flow can run a baseline where the
    tuner would decide (the flows' ``policy`` parameter). A flow cannot wait for capacity as the simulator does:
    a policy that finds no place raises, naming it."""

    n_observed = None  # a baseline keeps no learnt state

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def decide(self, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
        d = self.policy.decide(job, cluster, current)
        if d is None:
            raise ConfigError(f"policy {self.policy.name!r}: no capacity for job {job.job_id} on this cluster")
        return d

    def expect(self, job: JobSpec, cluster: ClusterState) -> Prediction:
        """The prediction of the decision the policy would make (what a baseline knows: its table, or zeros)."""
        return self.decide(job, cluster).explanation.predicted

    def observe(self, m: Measurement) -> bool:
        return self.observe_many([m]) == [True]

    def observe_many(self, ms: Sequence[Measurement]) -> list[bool]:
        """Passed on to a policy that ``learns``; True for each (a baseline keeps no record of ids)."""
        if self.policy.learns:
            self.policy.observe_many(ms)
        return [True] * len(ms)

    def add_variants(self, variants: Iterable[Variant]) -> int:
        """Nothing: a policy decides among the variants it was built with (the flow's own)."""
        return 0

    def save(self) -> None:
        """Nothing to keep: a baseline's state lives as long as the flow."""
        return None
