"""MLflow tracking by the OLTunes conventions (``mlflow/README.md``), with a disk buffer and history replay."""

from oltunes.tracking.conventions import EXPERIMENTS, METRICS, experiment_for
from oltunes.tracking.store import ServiceRun, Tracker, TrackingUnavailable

__all__ = ["EXPERIMENTS", "METRICS", "ServiceRun", "Tracker", "TrackingUnavailable", "experiment_for"]
