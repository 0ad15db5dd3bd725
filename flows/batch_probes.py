"""A batch job's parts as the flow runs them: the probe shards first (each on its own candidate, under its own
lease, observed as ``purpose='probe'``), then the rest on the job's decision (`run_parts`).

The probe shards' rows are the job's first rows (`oltunes.launchers.batch_job.part_bounds`): nothing is computed
twice. Their record (`oltunes.launchers.probe_shards.ProbeRecord`) is written before the first one runs, so a
re-run after a crash finishes an interrupted probe on its own candidate and skips the finished ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import get_run_logger

from oltunes.allocator.holder import Leases, hold_lease
from oltunes.errors import ConfigError
from oltunes.launchers import WorkerSpec
from oltunes.launchers.batch_job import Part, measurement_from_results
from oltunes.launchers.probe_shards import ProbeRecord, ProbeShard, probe_decisions, probe_sizes
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Pool
from tasks import tracking as track
from tasks import tuning
from tasks.workers import run_worker

if TYPE_CHECKING:
    from flows.batch_inference import BatchParams
    from oltunes.tracking import Tracker
    from oltunes.tuner.protocol import TunerLike


@dataclass
class Probing:
    """What a job's probe shards did in this run."""

    record: ProbeRecord | None = None
    measured: list[Measurement] = field(default_factory=list)  # probes run (or resumed) now, in order
    runs: list[str | None] = field(default_factory=list)  # their MLflow runs (None: buffered)
    wall_s: float = 0.0

    @property
    def items(self) -> list[int]:
        return self.record.items if self.record else []


def wants_probes(p: BatchParams, job: JobSpec) -> bool:
    """A new job probes when it is large enough and probing is on (never in advisory mode: the tuner must not
    change what runs)."""
    return p.probes > 0 and p.probe_share > 0 and job.items >= p.probe_min_items and not p.advisory


async def first_decision(p: BatchParams, leases: Leases, job: JobSpec, out: Path
                         ) -> tuple[Decision, ProbeRecord | None]:  # fmt: skip
    """Decide the job asking for ``p.probes`` trials (under a lease, released at once: each probe takes its own);
    when it suggests any, write the probe record (the decision's choice and its trials, with their sizes)."""
    async with hold_lease(leases, job.model_copy(update={"trials": p.probes}), ttl_s=p.lease_ttl_s,
                          wait_s=p.lease_wait_s) as lease:  # fmt: skip
        first, device = lease.decision, lease.device
    if not first.trials:
        return first, None
    decisions = probe_decisions(first, device, p.probes)
    sizes = probe_sizes(job.items, [(d.candidate.batch_size, d.explanation.predicted) for d in decisions],
                        p.probe_share, p.probe_s)  # fmt: skip
    record = ProbeRecord(first=first, probes=[ProbeShard(items=n, decision=d) for n, d in zip(sizes, decisions)])
    record.save(out)  # before any plan or probe: a re-run resumes exactly these shards
    return first, record


async def run_probes(p: BatchParams, ctx: JobContext, parts: list[Part], record: ProbeRecord) -> Probing:
    """Run every probe shard not yet complete, each under its own lease on its own candidate; log each to MLflow
    (tagged ``purpose=probe``, predicted beside measured) and observe it."""
    log = get_run_logger()
    done = Probing(record=record)
    t0 = time.monotonic()
    for part in (q for q in parts if q.probe is not None):
        shard = record.probes[part.probe]  # type: ignore[index]
        d = shard.decision
        if part.complete(p.shard_size):
            log.info("job %s: probe %d (%s) already complete", ctx.job.job_id, part.probe, d.candidate.key)
            continue
        pjob = ctx.job.model_copy(update={"job_id": d.job_id, "items": part.items, "trials": 0})
        async with hold_lease(ctx.leases, pjob, ttl_s=p.lease_ttl_s, wait_s=p.lease_wait_s, decision=d) as lease:
            results, _ = await run_parts(p, pjob, [part], ctx.pool_of(lease.pool), lease.device, d)
        m = measurement_from_results(ctx.job, d.candidate, results, d)
        if m is None:
            continue
        m = m.model_copy(update={"purpose": "probe"})
        pred = d.explanation.predicted
        done.runs.append(await track.log_measurement(
            ctx.tracker, m, slo_ms=p.slo_ms, policy=ctx.policy, decision=d,
            run_name=f"batch-{p.family}-{ctx.job.job_id[:8]}-probe-{part.probe}",
            extra_params={**ctx.params, "purpose": "probe", "probe_of": ctx.job.job_id, "probe_index": part.probe},
            extra_metrics={"predicted_latency_p99_ms": pred.latency_p99_ms,
                           "predicted_energy_j_per_item": pred.energy_j_per_item,
                           "predicted_throughput_items_per_s": pred.throughput_items_per_s},
            extra_tags={"purpose": "probe"}, dataset=p.dataset,
        ))  # fmt: skip
        await tuning.observe(ctx.tuner, m)
        log.info("job %s: probe %d on %s: p99 %.3g ms (predicted %.3g), %.3g items/s (predicted %.3g)",
                 ctx.job.job_id, part.probe, d.candidate.key, m.latency_p99_ms, pred.latency_p99_ms,
                 m.throughput_items_per_s, pred.throughput_items_per_s)
        done.measured.append(m)
    done.wall_s = time.monotonic() - t0
    return done


@dataclass
class JobContext:
    """What the parts of one job share: the job, its cluster, its tuner, its tracker and its MLflow labels."""

    job: JobSpec
    cluster: ClusterState
    leases: Leases
    tuner: TunerLike
    tracker: Tracker
    policy: str
    params: dict[str, Any]

    def pool_of(self, name: str) -> Pool:
        if name not in {q.name for q in self.cluster.pools}:
            raise ConfigError(f"parameter 'inventory': the tuning service placed job {self.job.job_id} on pool "
                              f"{name!r}, which this flow's inventory does not list; give the flow the service's "
                              "inventory")
        return self.cluster.pool(name)


async def run_parts(p: BatchParams, job: JobSpec, parts: list[Part], pool: Pool, device: int, decision: Decision
                    ) -> tuple[list[Any], float]:  # fmt: skip
    """Run `parts` one after another on the leased device (its slot is the job's; the worker's own concurrency is
    the decision's). Returns the part results and the wall time."""
    device_ids = (pool.device_ids[device],) if device < len(pool.device_ids) else ()
    on_device = pool.model_copy(update={"device_ids": device_ids})
    t0 = time.monotonic()
    results = []
    for part in parts:
        spec = WorkerSpec(
            mode="batch", job=job, candidate=decision.candidate, pool=on_device, run_dir=part.run_dir,
            decision_id=decision.decision_id, input_path=part.input_path, output_dir=part.output_dir,
            shard_size=p.shard_size, items=part.items,
        )  # fmt: skip
        # Prefect's timeout is the outer guard; the launcher's own deadline stops the process first.
        results.append(await run_worker.with_options(timeout_seconds=p.part_timeout_s + 60)(p.launcher, spec, p.part_timeout_s))
    return results, time.monotonic() - t0
