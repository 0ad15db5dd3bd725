"""Worker tasks: plan a batch job's parts, run one part through a launcher."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from oltunes.errors import WorkerError
from oltunes.launchers import Launcher, WorkerResult, WorkerSpec
from oltunes.launchers.batch_job import Part, check_input, plan_parts
from oltunes.types import Variant


def retry_on_worker_crash(task, task_run, state) -> bool:  # noqa: ANN001 (Prefect's callback signature)
    """Retry only a crashed or hung worker: its output is resumable, so a retry never duplicates rows.

    Bad input (ConfigError, DataError, ModelError, and InputRejected: a worker that exited refusing its input)
    would fail the same way again and is not retried.
    """
    # Prefect hands the failed state holding the raised exception as its data.
    return isinstance(state.data, WorkerError)


@task(name="check-dataset", cache_policy=NO_CACHE, timeout_seconds=600)
async def check_dataset(dataset: Path, variants: list[Variant]) -> int:
    """Validate the dataset once, before any worker starts (not retried: bad data stays bad)."""
    return await asyncio.to_thread(check_input, dataset, variants)


@task(name="plan-parts", cache_policy=NO_CACHE, timeout_seconds=300)
async def plan_job_parts(output: Path, items: int, items_per_worker: int, dataset: Path | None,
                         probe_items: list[int] | None = None) -> list[Part]:  # fmt: skip
    return await asyncio.to_thread(plan_parts, output, items, items_per_worker, dataset, probe_items or ())


@task(
    name="run-worker",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=retry_on_worker_crash,
    timeout_seconds=3600,
    task_run_name="run-worker-{spec.run_dir.parent.name}",
)
async def run_worker(launcher: str, spec: WorkerSpec, timeout_s: float) -> WorkerResult:
    """Start a batch worker and wait for it (its own deadline kills it); stop it if this task is cancelled."""
    impl = Launcher.make(launcher)
    handle = await asyncio.to_thread(impl.start, spec)
    try:
        return await asyncio.to_thread(impl.wait, handle, timeout_s)
    except asyncio.CancelledError:  # Prefect timeout or flow cancellation: never leave the process behind
        await asyncio.to_thread(impl.stop, handle, 2.0)
        raise
