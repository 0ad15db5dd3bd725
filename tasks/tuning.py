"""Tuner tasks: warm-start from MLflow history, recommend, observe (and persist the in-process state)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from oltunes.config import Settings
from oltunes.errors import OLTunesError
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement

log = logging.getLogger(__name__)


@task(name="recommend", cache_policy=NO_CACHE, timeout_seconds=60)
async def recommend(tuner: Any, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
    """Ask the tuner; an HTTP tuner that cannot be reached answers with its safe default (source='fallback').

    `current` (re-tuning a running service) is where the job runs now, so the tuner can prefer staying put
    when moving would gain little; passed only to tuners whose ``recommend`` takes it.
    """
    if current is not None and "current" in inspect.signature(tuner.recommend).parameters:
        return await asyncio.to_thread(lambda: tuner.recommend(job, cluster, current=current))
    return await asyncio.to_thread(tuner.recommend, job, cluster)


@task(name="observe", cache_policy=NO_CACHE, timeout_seconds=60)
async def observe(tuner: Any, m: Measurement, settings: Settings) -> bool:
    """Feed one measurement back; an in-process tuner's state is saved so the next flow starts from it (merged,
    under the state file's lock, with what concurrent flows saved: `oltunes.tuner.local.LocalTuner`)."""
    accepted = await asyncio.to_thread(tuner.observe, m)
    save = getattr(tuner, "save", None)
    if save is not None:
        try:
            await asyncio.to_thread(save, settings.tuner_state_path)
        except (OSError, OLTunesError) as e:  # the observation is in MLflow: a later replay restores it
            log.warning("could not save tuner state to %s: %s", settings.tuner_state_path, e)
    return bool(accepted)
