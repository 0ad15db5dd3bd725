"""`Tracker`: log runs to MLflow by the OLTunes conventions, buffer them on disk when MLflow is unreachable,
and rebuild the learner's history from what was logged.

Exactly-once: every batch run carries its idempotency key (the measurement id) as a tag and every logged
Measurement is stored as a tag named by its id; before writing, the tracker looks for that tag, so a replay of the
buffer (or a re-run of a flow) never creates a second run or a second step for the same measurement.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from oltunes.config import get_settings
from oltunes.errors import OLTunesError
from oltunes.tracking import conventions as cv
from oltunes.tracking.buffer import DiskBuffer
from oltunes.types import Candidate, Decision, Measurement, Variant

log = logging.getLogger(__name__)


class TrackingUnavailable(OLTunesError):
    """MLflow could not be reached (reads fail with this; writes go to the disk buffer instead)."""


def _unreachable_errors() -> tuple[type[BaseException], ...]:
    import requests
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    return (MlflowException, requests.RequestException, sqlalchemy.exc.SQLAlchemyError, OSError)


class Tracker:
    """MLflow tracking with a disk buffer.

    Parameters
    ----------
    uri
        MLflow tracking URI; default ``settings.mlflow_uri`` (SQLite under OLTUNES_HOME).
    buffer_dir
        Where records wait while MLflow is unreachable; default ``settings.buffer_dir / "mlflow"``.
    artifact_root
        Artifact location for experiments this tracker creates; default ``settings.mlflow_artifacts``.
    """

    def __init__(self, uri: str | None = None, buffer_dir: Path | None = None, artifact_root: Path | None = None):
        s = get_settings()
        self.uri = uri or s.mlflow_uri
        self.buffer = DiskBuffer(buffer_dir or s.buffer_dir / "mlflow")
        self.artifact_root = Path(artifact_root or s.mlflow_artifacts)
        if self.uri.startswith("http"):
            # MLflow's default is 7 retries with exponential back-off (minutes); a flow must not stall on that.
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        self._client_obj: Any = None
        self._experiments: dict[str, str] = {}

    # -- MLflow plumbing ---------------------------------------------------------------------------------
    def _client(self) -> Any:
        if self._client_obj is None:
            from mlflow import MlflowClient

            if self.uri.startswith("sqlite:///"):
                Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self._client_obj = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
        return self._client_obj

    def _experiment_id(self, name: str) -> str:
        if name in self._experiments:
            return self._experiments[name]
        from mlflow.exceptions import MlflowException

        c = self._client()
        exp = c.get_experiment_by_name(name)
        if exp is None:
            try:
                eid = c.create_experiment(name, artifact_location=(self.artifact_root / name).as_uri())
            except MlflowException:  # created concurrently by another flow
                exp = c.get_experiment_by_name(name)
                if exp is None:
                    raise
                eid = exp.experiment_id
        else:
            eid = exp.experiment_id
        self._experiments[name] = eid
        return eid

    def _find_run(self, experiment: str, tag: str, value: str) -> Any | None:
        eid = self._experiment_id(experiment)
        runs = self._client().search_runs([eid], filter_string=f"tags.`{tag}` = '{value}'", max_results=1)
        return runs[0] if runs else None

    def _forget_client(self) -> None:
        """Rebuild the client and re-resolve experiment ids next time (a new server may be up)."""
        self._client_obj = None
        self._experiments.clear()

    def reachable(self) -> bool:
        try:
            self._client().search_experiments(max_results=1)
        except _unreachable_errors():
            return False
        return True

    # -- generic run logging -------------------------------------------------------------------------------
    def log_run(
        self,
        *,
        experiment: str,
        key: str,
        run_name: str = "",
        params: Mapping[str, Any] = {},
        metrics: Mapping[str, float] = {},
        tags: Mapping[str, str] = {},
    ) -> str | None:
        """Log one finished run, exactly once per `key`; returns its run id, or None if it was buffered.

        Reusable by any producer of runs (flows, the simulator): the key is stored as a tag and a run with
        that key already present is returned instead of creating another.
        """
        record = {
            "op": "run",
            "experiment": experiment,
            "run_name": run_name,
            "params": {k: str(v) for k, v in params.items()},
            "metrics": {k: float(v) for k, v in metrics.items()},
            "tags": dict(tags),
        }
        return self._apply_or_buffer(key, record)

    def _write_run(self, key: str, rec: dict[str, Any]) -> str:
        from mlflow.entities import Metric, Param, RunTag

        existing = self._find_run(rec["experiment"], cv.TAG_KEY, key)
        if existing is not None:
            return existing.info.run_id
        c = self._client()
        run = c.create_run(
            self._experiment_id(rec["experiment"]),
            run_name=rec.get("run_name") or None,
            tags={cv.TAG_KEY: key},
        )
        rid = run.info.run_id
        now = int(time.time() * 1000)
        c.log_batch(
            rid,
            metrics=[Metric(k, v, now, 0) for k, v in rec["metrics"].items()],
            params=[Param(k, v) for k, v in rec["params"].items()],
            tags=[RunTag(k, v) for k, v in rec["tags"].items()],
        )
        c.set_terminated(rid, status=rec.get("status", "FINISHED"))
        return rid

    # -- measurements --------------------------------------------------------------------------------------
    def log_measurement(
        self,
        m: Measurement,
        *,
        experiment: str | None = None,
        slo_ms: float | None = None,
        policy: str = "",
        decision: Decision | None = None,
        run_name: str = "",
        extra_params: Mapping[str, Any] = {},
        extra_metrics: Mapping[str, float] = {},
        extra_tags: Mapping[str, str] = {},
    ) -> str | None:
        """One run for one Measurement (a batch job, or one simulated job), keyed by its measurement id."""
        params = {**cv.decision_params(m.candidate, decision), **extra_params}
        metrics = {**cv.measurement_metrics(m, slo_ms), **extra_metrics}
        tags = {**cv.measurement_tags(m, policy, decision), **extra_tags}
        if slo_ms is not None:
            params["slo_ms"] = str(slo_ms)
        return self.log_run(
            experiment=experiment or cv.experiment_for("simulation" if m.simulated else m.kind),
            key=m.measurement_id,
            run_name=run_name or f"{m.kind}-{m.job_id[:8]}",
            params=params,
            metrics=metrics,
            tags=tags,
        )

    def service(
        self,
        service_id: str,
        *,
        candidate: Candidate | None = None,
        experiment: str | None = None,
        run_name: str = "",
        params: Mapping[str, Any] = {},
        tags: Mapping[str, str] = {},
    ) -> ServiceRun:
        """The one run of a streaming service (found again by `service_id` after a restart or a replay)."""
        p = dict(cv.decision_params(candidate)) if candidate is not None else {}
        p.update({k: str(v) for k, v in params.items()})
        return ServiceRun(self, service_id, experiment or cv.experiment_for("streaming"), run_name or service_id, p, dict(tags))

    def _write_step(self, key: str, rec: dict[str, Any]) -> str:
        from mlflow.entities import Metric, Param, RunTag

        c = self._client()
        run = self._find_run(rec["experiment"], cv.TAG_SERVICE, rec["service_id"])
        if run is None:
            run = c.create_run(
                self._experiment_id(rec["experiment"]),
                run_name=rec.get("run_name") or None,
                tags={cv.TAG_SERVICE: rec["service_id"], **rec.get("tags", {})},
            )
            # Params are immutable in MLflow: they describe the service's first decision; later switches are
            # logged as step metrics and the per-step measurement tags.
            if rec.get("params"):
                c.log_batch(run.info.run_id, params=[Param(k, v) for k, v in rec["params"].items()])
        rid = run.info.run_id
        if rec["op"] == "end":
            c.set_terminated(rid, status=rec.get("status", "FINISHED"))
            return rid
        mtag = rec.get("measurement_tag")
        if mtag and mtag in c.get_run(rid).data.tags:
            return rid  # this step already landed: replay must not count it twice
        now = int(time.time() * 1000)
        step = int(rec["step"])
        c.log_batch(
            rid,
            metrics=[Metric(k, v, now, step) for k, v in rec["metrics"].items()],
            tags=[RunTag(k, v) for k, v in rec.get("step_tags", {}).items()],
        )
        return rid

    # -- buffer --------------------------------------------------------------------------------------------
    def _apply(self, key: str, rec: dict[str, Any]) -> str:
        if rec["op"] == "run":
            return self._write_run(key, rec)
        return self._write_step(key, rec)

    def _apply_or_buffer(self, key: str, rec: dict[str, Any]) -> str | None:
        self.flush()  # keep order: older buffered records land first
        if len(self.buffer):
            self.buffer.put(key, rec)
            return None
        try:
            return self._apply(key, rec)
        except _unreachable_errors() as e:
            log.warning("MLflow at %s unreachable (%s); buffered record %s on disk", self.uri, e, key)
            self._forget_client()
            self.buffer.put(key, rec)
            return None

    def flush(self) -> int:
        """Replay buffered records in order; stop at the first failure. Returns how many landed."""
        done = 0
        for path, rec in self.buffer.items():
            try:
                self._apply(rec["key"], rec)
            except _unreachable_errors() as e:
                log.info("MLflow still unreachable (%s); %d record(s) stay buffered", e, len(self.buffer))
                self._forget_client()
                break
            self.buffer.remove(path)
            done += 1
        return done

    def pending(self) -> int:
        return len(self.buffer)

    # -- history -------------------------------------------------------------------------------------------
    def history(
        self,
        kinds: Iterable[str] = ("batch", "streaming"),
        *,
        include_simulated: bool = False,
        include_buffered: bool = True,
    ) -> list[Measurement]:
        """Every Measurement logged in the experiments of `kinds` (plus buffered ones), oldest first.

        These are exactly the learner's observations, so ``tuner.replay(tracker.history())`` warm-starts a
        fresh tuner to the state the logged runs imply.
        """
        try:
            found = self._logged_measurements(kinds, include_simulated)
        except _unreachable_errors() as e:
            self._forget_client()
            raise TrackingUnavailable(f"MLflow at {self.uri} is unreachable ({e}); history cannot be read now") from e
        if include_buffered:
            for _, rec in self.buffer.items():
                tags = rec.get("tags", {}) | rec.get("step_tags", {})
                for k, v in tags.items():
                    if k.startswith(cv.TAG_MEASUREMENT_PREFIX):
                        m = cv.parse_measurement(v)
                        found.setdefault(m.measurement_id, m)
        out = [m for m in found.values() if include_simulated or not m.simulated]
        return sorted(out, key=lambda m: m.timestamp)

    def _logged_measurements(self, kinds: Iterable[str], include_simulated: bool) -> dict[str, Measurement]:
        c = self._client()
        names = [cv.experiment_for(k) for k in kinds]
        if include_simulated and cv.experiment_for("simulation") not in names:
            names.append(cv.experiment_for("simulation"))
        eids = [e.experiment_id for n in names if (e := c.get_experiment_by_name(n)) is not None]
        found: dict[str, Measurement] = {}
        if eids:
            token = None
            while True:
                page = c.search_runs(eids, max_results=1000, page_token=token)
                for run in page:
                    for k, v in run.data.tags.items():
                        if k.startswith(cv.TAG_MEASUREMENT_PREFIX):
                            m = cv.parse_measurement(v)
                            found.setdefault(m.measurement_id, m)
                token = page.token
                if not token:
                    break
        return found

    # -- model registry ------------------------------------------------------------------------------------
    def register_variant(self, variant: Variant, measured_accuracy: float | None, run_id: str | None = None) -> str | None:
        """Put a model variant in the MLflow model registry with its (measured) accuracy.

        One registered model per variant, one version per model file; the measured accuracy is (re)set as a
        version tag, so registering again after a new measurement updates rather than duplicates.
        Returns the version, or None when MLflow is unreachable (registration is retried on the next call).
        """
        from mlflow.exceptions import MlflowException

        name = f"oltunes.{variant.name}"
        source = Path(variant.path).resolve().as_uri() if variant.path else f"oltunes-variant:{variant.name}"
        tags = {
            "family": variant.family,
            "size": variant.size,
            "precision": variant.precision,
            "published_accuracy": f"{variant.accuracy:.6g}",
            "params": str(variant.params),
            "bytes": str(variant.bytes),
        }
        try:
            c = self._client()
            try:
                c.create_registered_model(name, tags=tags, description=f"OLTunes variant {variant.name}")
            except MlflowException as e:
                if "RESOURCE_ALREADY_EXISTS" not in str(e.error_code):
                    raise
            versions = c.search_model_versions(f"name = '{name}'")
            mv = next((v for v in versions if v.source == source), None)
            if mv is None:
                mv = c.create_model_version(name, source=source, run_id=run_id, tags=tags)
            if measured_accuracy is not None:
                c.set_model_version_tag(name, mv.version, "measured_accuracy", f"{measured_accuracy:.6g}")
                c.set_registered_model_tag(name, "measured_accuracy", f"{measured_accuracy:.6g}")
            return str(mv.version)
        except _unreachable_errors() as e:
            log.warning("could not register %s in the MLflow model registry (%s)", name, e)
            self._forget_client()
            return None


class ServiceRun:
    """The single MLflow run of one streaming service; step-wise metrics, buffered like everything else."""

    def __init__(self, tracker: Tracker, service_id: str, experiment: str, run_name: str, params: dict, tags: dict):
        self.tracker = tracker
        self.service_id = service_id
        self.experiment = experiment
        self.run_name = run_name
        self.params = params
        self.tags = tags

    def _rec(self, op: str) -> dict[str, Any]:
        return {
            "op": op,
            "experiment": self.experiment,
            "service_id": self.service_id,
            "run_name": self.run_name,
            "params": self.params,
            "tags": self.tags,
        }

    def log_step(
        self,
        step: int,
        m: Measurement,
        *,
        slo_ms: float | None = None,
        policy: str = "",
        decision: Decision | None = None,
        extra_metrics: Mapping[str, float] = {},
    ) -> str | None:
        """Log one control interval's Measurement as step `step`; at most once per measurement id."""
        rec = self._rec("step")
        rec["step"] = step
        rec["metrics"] = {**cv.measurement_metrics(m, slo_ms), **{k: float(v) for k, v in extra_metrics.items()}}
        mtags = cv.measurement_tags(m, policy, decision)
        rec["measurement_tag"] = cv.measurement_tag(m.measurement_id)
        rec["step_tags"] = {rec["measurement_tag"]: mtags[rec["measurement_tag"]]}
        # Run-level tags that may change over the service's life keep their latest value.
        rec["step_tags"].update({k: mtags[k] for k in (cv.TAG_ENERGY_SOURCE, cv.TAG_SIMULATED, cv.TAG_JOB)})
        if policy:
            rec["step_tags"][cv.TAG_POLICY] = policy
        return self.tracker._apply_or_buffer(f"{self.service_id}/{m.measurement_id}", rec)

    def end(self, status: str = "FINISHED") -> str | None:
        rec = self._rec("end")
        rec["status"] = status
        return self.tracker._apply_or_buffer(f"{self.service_id}/end", rec)
