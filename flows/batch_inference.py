"""Batch inference flow: tuner -> launcher -> measurement + telemetry -> MLflow run -> tuner.observe.

Run it from Python (``asyncio.run(batch_inference(family="cnn", dataset="in.parquet"))``), through ``oltunes
demo``, or as the scheduled deployment in ``prefect.yaml``.

The job runs under a lease on the device its decision names (`oltunes.allocator.book`: with a tuning service, the
cluster's allocator). A job larger than `items_per_worker` is split into parts run one after another on that
device; every output shard is atomic, so re-running a failed flow with the same `output` resumes it without
losing or duplicating rows.

A large job (``probe_min_items`` items or more) first runs probe shards (``docs/exploration.md``): a small first
shard on the decision's choice and on each of its top ``probes`` trials, each under its own lease, observed as
``purpose='probe'``; then it is decided again and runs the rest there. The probe shards' rows are the job's first
rows: nothing is computed twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from pydantic import BaseModel, ConfigDict, Field, field_validator

from flows.common import (bind_ephemeral_api, check_family, make_tracker, make_tuner, ran_policy, run_id, run_name,
                          validate)
from flows.batch_probes import JobContext, Probing, first_decision, run_parts, run_probes, wants_probes
from oltunes.config import get_settings
from oltunes.errors import DataError
from oltunes.launchers.batch_job import measurement_from_results
from oltunes.launchers.environment import Environment
from oltunes.launchers.probe_shards import recorded_probes
from oltunes.allocator.holder import hold_lease, leases_for
from oltunes.allocator.types import MAX_TTL_S
from oltunes.types import MAX_TRIALS, PROBE_SHARE, ClusterState, Decision, Id, JobSpec, Measurement, Objective, Variant
from tasks import tracking as track
from tasks import tuning
from tasks.workers import check_dataset, plan_job_parts


class BatchParams(BaseModel):
    """The flow's parameters, validated before anything runs (errors name the parameter)."""

    model_config = ConfigDict(extra="forbid")

    family: Id
    dataset: Path | None = None
    output: Path | None = None
    slo_ms: float = Field(gt=0, description="p99 latency bound of one batch")
    accuracy_floor: float = Field(ge=0, le=1)
    objective: Objective
    items: int | None = Field(default=None, ge=1, description="simulated launcher: items to simulate")
    job_id: Id | None = None  # becomes a folder name: the strict id pattern, no path separators
    launcher: str
    inventory: str | None = None
    items_per_worker: int = Field(ge=1)
    shard_size: int = Field(ge=1)
    part_timeout_s: float = Field(gt=0)
    deadline_s: float | None = Field(default=None, gt=0)
    policy: str
    advisory: bool = False
    output_wait_s: float = Field(ge=0, le=86_400, description="wait this long for another run to release `output`")
    lease_ttl_s: float = Field(gt=0, le=MAX_TTL_S, description="the job's lease expires this long after its holder dies")
    lease_wait_s: float = Field(ge=0, le=7 * 86_400, description="wait this long in the queue for a lease")
    probes: int = Field(ge=0, le=MAX_TRIALS, description="trials to probe before committing a large job (0: none)")
    probe_share: float = Field(ge=0, le=0.2, description="share of the job's items in each probe shard (0: none)")
    probe_min_items: int = Field(ge=1, description="jobs with fewer items are not probed")
    probe_s: float = Field(gt=0, le=3_600, description="a probe shard's predicted run time at most")

    @field_validator("dataset", "output")
    @classmethod
    def _absolute(cls, v: Path | None) -> Path | None:
        return None if v is None else v.expanduser().resolve()


@asynccontextmanager
async def output_locked(env: Environment, out: Path, wait_s: float) -> AsyncIterator[None]:
    """Hold the output directory's lock for the job's life (taken in a thread: it may wait `wait_s`)."""
    with contextlib.ExitStack() as stack:
        await asyncio.to_thread(stack.enter_context, env.outputs_locked(out, wait_s))
        yield


class BatchOutcome(BaseModel):
    job_id: str
    job: JobSpec
    decision: Decision
    measurement: Measurement | None
    run_id: str | None = Field(description="MLflow run (None: buffered on disk, MLflow unreachable)")
    observed: bool
    output: str | None
    parts: int
    job_wall_s: float
    first_decision: Decision | None = Field(default=None, description="the decision the probes were chosen from")
    probes: list[Measurement] = Field(default=[], description="probe shards measured in this run (purpose='probe')")


@flow(name="batch-inference", flow_run_name=run_name("batch"), validate_parameters=True)
async def batch_inference(
    family: str,
    dataset: str | None = None,
    output: str | None = None,
    slo_ms: float = 1000.0,
    accuracy_floor: float = 0.0,
    objective: Objective = "energy",
    items: int | None = None,
    job_id: str | None = None,
    launcher: str = "local",
    inventory: str | None = None,
    items_per_worker: int = 50_000,
    shard_size: int = 1_000,
    part_timeout_s: float = 1_800.0,
    deadline_s: float | None = None,
    policy: str = "oltunes",
    advisory: bool = False,
    output_wait_s: float = 0.0,
    lease_ttl_s: float = 60.0,
    lease_wait_s: float = 3_600.0,
    probes: int = 2,
    probe_share: float = PROBE_SHARE,
    probe_min_items: int = 50_000,
    probe_s: float = 60.0,
) -> BatchOutcome:
    """Run one batch inference job where the tuner says, measure it, log it, and feed it back.

    Parameters
    ----------
    family
        Model family (a zoo family for real launchers; a performance-model family for ``simulated``).
    dataset
        Input dataset (``.parquet``/``.npz`` with id, x[, label]); required unless the launcher is simulated.
    output
        Output directory (default ``$OLTUNES_HOME/outputs/<job_id>``); re-running with the same one resumes.
    slo_ms, accuracy_floor, objective, deadline_s
        The job's requirements (`oltunes.types.JobSpec`).
    items
        Simulated launcher only: how many items to simulate (default: the dataset's size).
    launcher
        ``local`` (default), ``simulated`` or ``docker``.
    inventory
        Pools YAML; default the launcher's own (``infra/inventory.local.yaml`` for local).
    items_per_worker
        Parts of at most this many items, run one after another on the leased device.
    shard_size
        Rows per output shard (the unit of atomic output and of resumption).
    part_timeout_s
        A worker running longer is stopped and its part retried.
    policy
        The deciding placement policy by name (``Policy.known()``; default the tuner), also tagged in MLflow.
    advisory
        Advisory mode (``docs/decisions.md``): the job runs where `policy` puts it (``oltunes``, the default, runs
        ``least-loaded``), the tuner's own decision is recorded beside it in MLflow, and the tuner learns the
        measurement. The tuner never changes what runs.
    output_wait_s
        Another run holding `output` (its lock, ``<output>/.lock``): wait up to this long for it to finish,
        then resume whatever it left undone; ``0`` (default) fails at once, naming the directory and its holder.
    lease_ttl_s, lease_wait_s
        The job holds a lease on its device (from the tuning service when ``OLTUNES_TUNER_URL`` is set, so
        concurrent runs never share a slot), renewed every ``lease_ttl_s / 3`` and lost ``lease_ttl_s`` after the
        flow dies; a job that does not fit waits in the queue up to ``lease_wait_s``, then fails.
    probes, probe_share, probe_min_items, probe_s
        Probe shards (``docs/exploration.md``): a job of at least ``probe_min_items`` items first runs
        ``probe_share`` of its items (at least 4 batches, at most ``probe_s`` seconds as predicted) on the
        decision's choice and on each of its top ``probes`` trials, then is decided again on what they measured.
        ``0`` disables (and advisory mode never probes). A resumed job keeps the probe shards it started with.
    """
    bind_ephemeral_api()  # a SIGKILLed flow process must not leave Prefect's server (or its workers) behind
    p = validate(
        BatchParams, family=family, dataset=dataset, output=output, slo_ms=slo_ms, accuracy_floor=accuracy_floor,
        objective=objective, items=items, job_id=job_id, launcher=launcher, inventory=inventory,
        items_per_worker=items_per_worker, shard_size=shard_size, part_timeout_s=part_timeout_s,
        deadline_s=deadline_s, policy=policy, advisory=advisory, output_wait_s=output_wait_s, lease_ttl_s=lease_ttl_s,
        lease_wait_s=lease_wait_s, probes=probes, probe_share=probe_share, probe_min_items=probe_min_items,
        probe_s=probe_s,
    )  # fmt: skip
    settings = get_settings()
    env = Environment.make(p.launcher)
    if p.dataset is not None and not p.dataset.is_file():
        raise DataError(f"parameter 'dataset': {p.dataset} does not exist")
    if p.dataset is None and env.needs_dataset:
        raise DataError(f"parameter 'dataset': required with launcher {p.launcher!r}")
    variants = env.variants(settings)
    family_variants = check_family(p.family, variants, p.launcher)
    # Bad data is refused here, before any decision, output file or worker (and it is never retried).
    n_items = p.items if p.dataset is None else await check_dataset(p.dataset, family_variants)
    if not n_items:
        raise DataError(f"parameter 'items': set it (>= 1) or give a dataset (launcher {p.launcher!r})")
    jid = p.job_id or run_id()
    out = p.output or settings.home / "outputs" / jid
    cluster = await asyncio.to_thread(env.usable_cluster, p.inventory, get_run_logger())  # engines checked: before any decision
    job = JobSpec(
        job_id=jid, kind="batch", family=p.family, slo_ms=p.slo_ms, accuracy_floor=p.accuracy_floor,
        objective=p.objective, items=n_items, deadline_s=p.deadline_s,
    )  # fmt: skip

    # One run per output directory at a time (two would race on the same shards, and log and learn one job twice).
    async with output_locked(env, out, p.output_wait_s):
        return await _run_job(p, env, variants, family_variants, job, out, cluster)


async def _run_job(
    p: BatchParams, env: Environment, variants: list[Variant], family_variants: list[Variant], job: JobSpec,
    out: Path, cluster: ClusterState,
) -> BatchOutcome:  # fmt: skip
    """Decide (or resume the recorded decision), probe, run the parts, measure, log, feed back: under the output
    lock."""
    started_at = time.time()  # the job's MLflow run spans from here (the lock is held) to its measurement
    log = get_run_logger()
    jid = job.job_id
    tracker = make_tracker()
    tuner, tsettings = make_tuner(env, variants, p.policy, p.advisory)
    ran = ran_policy(p.policy, p.advisory)
    replayed = await track.warm_start(tracker, tuner, tsettings, ("batch", "streaming"), env)
    recorded, probe_record = env.recorded_decision(out), recorded_probes(out)
    started = recorded or (probe_record.first if probe_record else None)
    if started is not None:
        # A re-run resumes the job (its id, its probe shards, its decision) as its finished shards were made.
        job = job.model_copy(update={"job_id": started.job_id})
        jid = started.job_id
        log.info("job %s: resuming with its recorded %s", jid,
                 f"decision {recorded.candidate.key}" if recorded else f"{len(probe_record.probes)} probe shard(s)")
    leases = leases_for(tuner, cluster.pools)
    params = {"launcher": p.launcher, "objective": p.objective, "accuracy_floor": p.accuracy_floor}
    ctx = JobContext(job=job, cluster=cluster, leases=leases, tuner=tuner, tracker=tracker, policy=ran, params=params)
    probing = Probing(record=probe_record)
    if started is None and wants_probes(p, job):
        first, probing.record = await first_decision(p, leases, job, out)
        if probing.record is None:  # no trial worth it: the first decision is the job's
            recorded = first.model_copy(update={"trials": ()})
    first = probing.record.first if probing.record else None
    parts = await plan_job_parts(out, job.items, p.items_per_worker, p.dataset, probing.items)
    if probing.record is not None:
        probing = await run_probes(p, ctx, parts, probing.record)
    async with hold_lease(leases, job, ttl_s=p.lease_ttl_s, wait_s=p.lease_wait_s, decision=recorded) as lease:
        decision = lease.decision
        if env.recorded_decision(out) is None:
            env.record_decision(out, decision)
            log.info("job %s: decision %s (source %s), warm start replayed %d, probes %d", jid, decision.candidate.key,
                     decision.source, replayed, len(probing.measured))
        try:
            results, job_wall = await run_parts(p, job, [q for q in parts if q.probe is None],
                                                ctx.pool_of(lease.pool), lease.device, decision)
        except Exception as e:  # the job's run still spans it, with the outcome as its status
            await track.log_failed_job(
                tracker, decision, f"{type(e).__name__}: {e}", simulated=env.simulated, policy=ran,
                run_name=f"batch-{p.family}-{jid[:8]}", dataset=p.dataset, rows=job.items, started_at=started_at,
                extra_params=params,
            )  # fmt: skip
            raise
    m = measurement_from_results(job, decision.candidate, list(results), decision)

    run_id, observed = None, False
    if m is None:
        log.info("job %s: every part was already complete (resumed run); nothing new to measure", jid)
    else:
        switched = {} if first is None else {
            "switched_after_probes": str(first.candidate.key != decision.candidate.key).lower()}
        probed = {} if probing.record is None else {
            "probes": len(probing.items), "probe_items": sum(probing.items), "first_choice": first.candidate.key,
            "probe_candidates": ",".join(s.decision.candidate.key for s in probing.record.probes)[:500]}
        run_id = await track.log_measurement(
            tracker, m, slo_ms=p.slo_ms,
            policy=ran, decision=decision, run_name=f"batch-{p.family}-{jid[:8]}",
            extra_metrics={"job_wall_s": job_wall + probing.wall_s, "parts": float(len(parts))},
            extra_params={**params, **probed, "ran_on": decision.candidate.key},
            extra_tags={"purpose": "serve", **switched},
            dataset=p.dataset, started_at=started_at,
        )  # fmt: skip
        observed = await tuning.observe(tuner, m)
        if env.model_files:
            await track.register_variants(tracker, family_variants, decision.variant, m.accuracy)
    await track.publish_decision(decision, m, key=f"batch-decision-{jid[:12].lower()}", slo_ms=p.slo_ms, title=f"Batch job {jid[:8]}")
    rows = env.output_files(out)
    log.info("job %s: %d part(s), %d shard file(s), run %s, observed=%s", jid, len(parts), rows, run_id, observed)
    return BatchOutcome(
        job_id=jid, job=job, decision=decision, measurement=m, run_id=run_id, observed=observed,
        output=env.reported_output(out), parts=len(parts), job_wall_s=job_wall + probing.wall_s,
        first_decision=first, probes=probing.measured,
    )  # fmt: skip
