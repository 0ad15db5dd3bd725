"""Serving tasks for the streaming flow's control loop: publish its address, log one step, end the service's run."""

from __future__ import annotations

import asyncio

from prefect import task
from prefect.artifacts import acreate_markdown_artifact
from prefect.cache_policies import NO_CACHE

from oltunes.launchers.service_records import ServiceRecord
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


@task(name="service-address-artifact", cache_policy=NO_CACHE, timeout_seconds=60)
async def publish_address(rec: ServiceRecord, key: str) -> str:
    """A markdown artifact: where the service's clients reach it, endpoint by endpoint."""
    rows = "\n".join(f"| {name} | `{url}` |" for name, url in rec.endpoints.items())
    md = (f"# Streaming service {rec.service_id}\n\nServing **{', '.join(rec.models)}** at **{rec.url}** "
          f"(Open Inference Protocol / KServe v2; launcher `{rec.launcher}`, host `{rec.host}`).\n\n"
          f"| endpoint | address |\n|---|---|\n{rows}\n\n"
          "A gateway off loopback needs `Authorization: Bearer $OLTUNES_GATEWAY_TOKEN`. "
          "`oltunes services` lists the running services.\n")  # fmt: skip
    await acreate_markdown_artifact(markdown=md, key=key, description=f"Address of streaming service {rec.service_id}")
    return md
