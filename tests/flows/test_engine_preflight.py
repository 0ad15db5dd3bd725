"""A deployed batch flow with ``launcher=docker`` and no engine fails before its decision, with the reason in the
run's log as one ERROR line (what `prefect deployment run --watch` streams), not as a bare "Failed"."""

from __future__ import annotations

import asyncio

import pytest

from flows.batch_inference import batch_inference
from oltunes.errors import MissingDependency
from oltunes.launchers.environment import Environment


async def _error_logs() -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterLevel
    async with get_client() as c:
        logs = await c.read_logs(LogFilter(level=LogFilterLevel(ge_=40)), limit=200)
    return [entry.message for entry in logs]


def test_missing_engine_fails_before_the_decision_with_its_reason_logged(settings_env, dataset, tmp_path):
    settings_env()
    inv = tmp_path / "inventory.yaml"
    inv.write_text(f"pools:\n  - name: cpu-a\n    accelerator: cpu\n    count: 1\n    cpu_set: [0]\n"
                   f"    engine: unix://{tmp_path}/no-engine.sock\n")  # fmt: skip
    out = tmp_path / "out"
    with pytest.raises(MissingDependency, match="no-engine.sock"):
        asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(out), launcher="docker",
                                    inventory=str(inv), job_id="job-no-engine"))  # fmt: skip
    assert Environment.make("docker").recorded_decision(out) is None  # no decision was made (a job records it)
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # logs reach the API in batches: send what is queued
    assert any("no-engine.sock" in m and "pool cpu-a" in m and "\n" not in m for m in asyncio.run(_error_logs()))
