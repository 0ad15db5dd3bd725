"""Log a simulation report to MLflow: one parent run per scenario run, one nested child run per policy.

Experiment ``oltunes-simulation`` (``oltunes.tracking.conventions.EXPERIMENTS["simulation"]``); params and metrics
are named like the report JSON so the MLflow UI compares the policies side by side. ``oltunes.tracking.Tracker``
logs flat runs only, hence these few plain ``mlflow`` calls.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from oltunes.config import Settings, apply_offline_env, get_settings
from oltunes.errors import MissingDependency
from oltunes.tracking.client import mlflow_errors, open_client
from oltunes.tracking.conventions import EXPERIMENTS

EXPERIMENT = EXPERIMENTS["simulation"]


def log_report(report: dict[str, Any], plots: list[Path] = (), settings: Settings | None = None) -> str:
    """Returns the parent run id."""
    apply_offline_env()
    s = settings or get_settings()
    try:
        import mlflow
    except ImportError as e:  # pragma: no cover - mlflow is a core dependency
        raise MissingDependency("mlflow is not installed: pip install mlflow") from e
    now = int(time.time() * 1000)
    s.home.mkdir(parents=True, exist_ok=True)
    open_client(s.mlflow_uri)  # creates a fresh store under a lock (concurrent first use races in alembic)
    with mlflow_errors(s.mlflow_uri):
        return _log(mlflow, report, plots, s, now)


def _log(mlflow: Any, report: dict[str, Any], plots: list[Path], s: Settings, now: int) -> str:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(s.mlflow_uri)
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        mlflow.create_experiment(EXPERIMENT, artifact_location=s.mlflow_artifacts.as_uri())
    mlflow.set_experiment(EXPERIMENT)
    meta = report.get("meta", {})
    with mlflow.start_run(run_name=f"simulate-{report['scenario']}") as parent:
        mlflow.set_tags({"simulated": "true", "scenario": report["scenario"]})
        mlflow.log_params({k: v for k, v in meta.items() if k != "definitions"} | {"scenario": report["scenario"]})
        for p in plots:
            mlflow.log_artifact(str(p))
        for name, m in report["policies"].items():
            with mlflow.start_run(run_name=name, nested=True) as child:
                mlflow.set_tags({"policy": name, "simulated": "true", "scenario": report["scenario"]})
                mlflow.log_params({"policy": name, "scenario": report["scenario"]})
                mlflow.log_metrics({k: float(v) for k, v in m.items() if isinstance(v, (int, float)) and v is not None})
                ts = report.get("timeseries", {}).get(name)
                if ts:  # the violation series as one metric with steps (one batch call, not one per point)
                    series = [
                        Metric("slo_violation_rate_over_time", float(v), now, step)
                        for step, v in enumerate(ts["slo_violation_rate"])
                    ]
                    MlflowClient().log_batch(child.info.run_id, metrics=series)
        return parent.info.run_id
