"""Tracking tasks: MLflow runs, warm start, model registry. MLflow being down is not a failure: records are buffered."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prefect import task
from prefect.artifacts import acreate_markdown_artifact
from prefect.cache_policies import NO_CACHE

from oltunes.config import Settings
from oltunes.errors import OLTunesError
from oltunes.launchers.environment import Environment
from oltunes.tracking import Tracker
from oltunes.tracking import warm_start as warm_start_from
from oltunes.tracking.report import decision_markdown
from oltunes.types import Decision, Measurement, Variant

log = logging.getLogger(__name__)


@task(name="warm-start-from-mlflow", cache_policy=NO_CACHE, timeout_seconds=600)
async def warm_start(tracker: Tracker, tuner: Any, settings: Settings, kinds: tuple[str, ...], env: Environment) -> int:
    """Replay into the tuner only what its state has not absorbed (cursor beside ``settings.tuner_state_path``),
    and only measurements made in an environment like `env` (simulated or real);
    0, with a warning, if MLflow is down (the tuner's own state is the source of truth)."""
    try:
        return await asyncio.to_thread(
            warm_start_from, tracker, tuner, settings.tuner_state_path, kinds, simulated=env.simulated
        )
    except OLTunesError as e:
        log.warning("tuner warm start skipped: %s", e)
        return 0


@task(name="mlflow-log-run", cache_policy=NO_CACHE, timeout_seconds=120)
async def log_measurement(tracker: Tracker, m: Measurement, **kwargs: Any) -> str | None:
    """Log one run (None = MLflow unreachable, the run waits in the disk buffer)."""
    return await asyncio.to_thread(lambda: tracker.log_measurement(m, **kwargs))


@task(name="mlflow-log-failed-job", cache_policy=NO_CACHE, timeout_seconds=120)
async def log_failed_job(tracker: Tracker, decision: Decision, reason: str, **kwargs: Any) -> str | None:
    """The FAILED run of a job that failed after its decision (None = buffered)."""
    return await asyncio.to_thread(lambda: tracker.log_failed_job(decision, reason, **kwargs))


@task(name="mlflow-register-variants", cache_policy=NO_CACHE, timeout_seconds=600)
async def register_variants(
    tracker: Tracker, variants: list[Variant], preferred: Variant, accuracy: float | None
) -> dict[str, str]:
    """Every variant as a logged ONNX model in the registry (once per file); alias ``preferred`` -> `preferred`."""
    return await asyncio.to_thread(
        lambda: tracker.register_variants(variants, preferred=preferred, measured_accuracy=accuracy)
    )


@task(name="decision-artifact", cache_policy=NO_CACHE, timeout_seconds=60)
async def publish_decision(
    decision: Decision, measured: Measurement | None, key: str, slo_ms: float | None = None, title: str = "Decision"
) -> str:
    """A markdown artifact: the decision, predicted vs measured, and the runner-ups."""
    md = decision_markdown(decision, measured, slo_ms=slo_ms, title=title)
    await acreate_markdown_artifact(markdown=md, key=key, description=f"{title} for job {decision.job_id}")
    return md
