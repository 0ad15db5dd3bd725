"""The one feature encoding every caller shares: ``encode(job, candidate) -> dict[str, float]``.

A candidate's features are the union of five disjoint *parts*, each computed by its own function:

============  ===========================================================  ===============================
part          features                                                     depends on
============  ===========================================================  ===============================
job           ``kind=streaming`` (batch jobs: absent), ``log_rate``       the job (constant per request)
placement     ``acc=<a>``, ``pool=<p>``, ``co_count``, ``co_load``,         pool + who shares the device
              ``co_family=<f>``, ``co_fs=<f>:<size>`` (weighted by load)
variant       ``family=<f>``, ``variant=<name>``, ``prec=<p>`` (not for   the model variant
              fp32, the baseline), ``log_params`` (when known)
batch         ``log_batch`` (0 at batch 1)                                 batch size
concurrency   ``log_conc`` (0 at concurrency 1)                            concurrency
============  ===========================================================  ===============================

The factorization machine's pairwise terms then model variant×accelerator, batch×accelerator and
family×co-runner (interference) effects without hand-made crosses. Because the parts are disjoint, the tuner
scores a whole (placement × variant × batch × concurrency) grid by combining per-part sums (see
``FMRegressor.grid_terms``) — numerically the same as encoding each candidate with :func:`encode`.

Numeric features are logs scaled to roughly [0, 3] so that no single feature dominates the FM's
interaction magnitudes.

Why so few one-hots (measured with ``benchmarks/learner_accuracy.py``, held-out MAPE after 200 observations):
a feature that is on in every row (``kind=batch``, ``prec=fp32``, ``conc=1``) is a second intercept whose
latent vector adds an interaction with everything, and several one-hots that identify the same thing
(``variant=``, ``fs=``, ``size=``) triple the step size on that variant — both only add noise to a model
that sees each row once. Dropping them (and the ``batch=<b>`` / ``conc=<c>`` one-hots, whose role the
log-scaled numerics take) cut the FM's held-out error by about half. What carries knowledge *across*
variants is ``log_params`` (paired with ``acc=``, a size-dependent speed-up per accelerator) and ``family=``;
``log_batch`` paired with ``acc=`` and ``family=`` is the batch slope per accelerator and architecture.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from oltunes.types import Candidate, CoRunner, JobSpec, Measurement, Placement, Variant

__all__ = [
    "JobContext",
    "batch_features",
    "co_runner_features",
    "concurrency_features",
    "encode",
    "job_context",
    "job_features",
    "placement_features",
    "variant_features",
]


class JobContext(NamedTuple):
    """The job-side inputs of the encoding (what a Measurement or a Placement also knows)."""

    kind: str = "batch"
    arrival_rate_rps: float = 0.0


def job_context(job: JobSpec | Measurement | Placement | JobContext) -> JobContext:
    """Extract the job-side encoding inputs from any of the shared types."""
    if isinstance(job, JobContext):
        return job
    kind = getattr(job, "kind", None) or ("streaming" if job.arrival_rate_rps > 0 else "batch")
    return JobContext(kind, float(job.arrival_rate_rps))


def job_features(ctx: JobContext) -> dict[str, float]:
    x = {"log_rate": math.log1p(ctx.arrival_rate_rps) / 4.0}
    if ctx.kind != "batch":
        x[f"kind={ctx.kind}"] = 1.0
    return x


def placement_features(pool: str, accelerator: str, co_runners: Iterable[CoRunner] = ()) -> dict[str, float]:
    return {f"acc={accelerator}": 1.0, f"pool={pool}": 1.0, **co_runner_features(co_runners)}


def co_runner_features(co_runners: Iterable[CoRunner]) -> dict[str, float]:
    """Additive over co-runners: features(A + B) == features(A) + features(B), key by key.

    Reads only ``family``, ``size`` and ``load`` of each co-runner (any object with those attributes).
    """
    x: dict[str, float] = {}
    n = 0
    load = 0.0
    for c in co_runners:
        n += 1
        load += c.load
        kf, ks = f"co_family={c.family}", f"co_fs={c.family}:{c.size}"
        x[kf] = x.get(kf, 0.0) + c.load
        x[ks] = x.get(ks, 0.0) + c.load
    if n:
        x["co_count"] = float(n)
        x["co_load"] = load
    return x


def variant_features(v: Variant) -> dict[str, float]:
    x = {f"family={v.family}": 1.0, f"variant={v.name}": 1.0}
    if v.params > 0:  # log (not log1p): keeps sub-million-parameter models apart (MobileNet-0.25: 0.47M)
        x["log_params"] = math.log(v.params / 1e6) / 3.0
    if v.precision != "fp32":
        x[f"prec={v.precision}"] = 1.0
    return x


def batch_features(batch_size: int) -> dict[str, float]:
    return {"log_batch": math.log2(batch_size) / 2.0}


def concurrency_features(concurrency: int) -> dict[str, float]:
    return {"log_conc": math.log2(concurrency)}


def encode(job: JobSpec | Measurement | Placement | JobContext, candidate: Candidate) -> dict[str, float]:
    """Features of one (job, candidate) pair; the single encoding used for learning and for prediction."""
    return {
        **job_features(job_context(job)),
        **placement_features(candidate.pool, candidate.accelerator, candidate.co_runners),
        **variant_features(candidate.variant),
        **batch_features(candidate.batch_size),
        **concurrency_features(candidate.concurrency),
    }
