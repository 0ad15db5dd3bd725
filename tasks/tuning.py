"""Tuner tasks: decide, observe (and keep what was learnt). The tuner is any `oltunes.tuner.protocol.TunerLike`."""

from __future__ import annotations

import asyncio
import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from oltunes.errors import OLTunesError
from oltunes.tuner.protocol import TunerLike
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement

log = logging.getLogger(__name__)


@task(name="decide", cache_policy=NO_CACHE, timeout_seconds=60)
async def decide(tuner: TunerLike, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision:
    """Ask the tuner; an HTTP tuner that cannot be reached answers with its safe default (source='fallback').

    `current` (re-tuning a running service) is where the job runs now, so the tuner can prefer staying put
    when moving would gain little.
    """
    return await asyncio.to_thread(tuner.decide, job, cluster, current)


@task(name="observe", cache_policy=NO_CACHE, timeout_seconds=60)
async def observe(tuner: TunerLike, m: Measurement) -> bool:
    """Feed one measurement back and keep it: an in-process tuner saves its state so the next flow starts from it
    (merged, under the state file's lock, with what concurrent flows saved: `oltunes.tuner.local.StateFileTuner`);
    a tuning service keeps its own."""
    accepted = await asyncio.to_thread(tuner.observe, m)
    try:
        await asyncio.to_thread(tuner.save)
    except (OSError, OLTunesError) as e:  # the observation is in MLflow: a later warm start restores it
        log.warning("could not save the tuner state: %s", e)
    return bool(accepted)
