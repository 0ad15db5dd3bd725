"""MLflow tracking by the OLTunes conventions (``mlflow/README.md``), with a disk buffer and history replay."""

from oltunes.tracking.client import RecordRejected, TrackingUnavailable
from oltunes.tracking.conventions import EXPERIMENTS, METRICS, experiment_for
from oltunes.tracking.history import warm_start
from oltunes.tracking.service import ServiceRun
from oltunes.tracking.store import Tracker

__all__ = [
    "EXPERIMENTS", "METRICS", "RecordRejected", "ServiceRun", "Tracker", "TrackingUnavailable", "experiment_for",
    "warm_start",
]  # fmt: skip
