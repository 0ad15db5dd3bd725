"""Serving tasks for the streaming flow's control loop: log one step, end the service's run."""

from __future__ import annotations

import asyncio

from prefect import task
from prefect.cache_policies import NO_CACHE

from oltunes.tracking import ServiceRun
from oltunes.types import Decision, Measurement


@task(name="mlflow-log-step", cache_policy=NO_CACHE, timeout_seconds=120)
async def log_step(
    svc: ServiceRun, step: int, m: Measurement, slo_ms: float, policy: str, decision: Decision, extra: dict[str, float]
) -> str | None:
    return await asyncio.to_thread(
        lambda: svc.log_step(step, m, slo_ms=slo_ms, policy=policy, decision=decision, extra_metrics=extra)
    )


@task(name="mlflow-end-service", cache_policy=NO_CACHE, timeout_seconds=120)
async def end_service(svc: ServiceRun, status: str) -> str | None:
    return await asyncio.to_thread(svc.end, status)
