"""Serving tasks for the streaming flow's control loop: read a worker's metrics window, log one step."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from prefect import task
from prefect.cache_policies import NO_CACHE

from oltunes.tracking import ServiceRun
from oltunes.types import Decision, Measurement


@task(name="read-worker-metrics", cache_policy=NO_CACHE, timeout_seconds=15)
async def read_worker_metrics(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The worker's metrics window, then a new window (``reset=true``: not retried, a retry would lose it).

    An unreachable worker (it just died; the supervisor restarts it) yields an empty window.
    """
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            r = await client.get(f"{url}/window", params={"reset": "true"})
            r.raise_for_status()
            return r.json()
    except httpx.HTTPError:
        return {}


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
