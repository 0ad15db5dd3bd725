"""`Tracker`: log runs to MLflow by the OLTunes conventions; buffer them on disk when MLflow is unreachable.

Exactly-once: every run carries its idempotency key as a tag (a batch run: its measurement id; a streaming
service: its service id). A run found by its key is trusted only when it is *complete*: its terminal status is
written last (``set_terminated``), so a run left RUNNING by a crash between ``create_run`` and ``log_batch`` is
completed by the replay (metrics carry the record's own timestamp, so logging them again adds nothing).

Records are applied in order; one MLflow *rejects* (`RecordRejected`: an error about that record) goes to the
buffer's dead-letter folder with the reason and the records behind it go on landing; an *unreachable* MLflow
(`TrackingUnavailable`) stops the replay until later.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from oltunes.config import get_settings
from oltunes.tracking import conventions as cv
from oltunes.tracking.buffer import DiskBuffer
from oltunes.tracking.client import RecordRejected, TrackingUnavailable, mlflow_errors, open_client
from oltunes.tracking.decisions import advice_metrics, decision_artifacts, decision_tags, link_served_model
from oltunes.tracking.filters import tag_equals
from oltunes.types import Decision, Measurement

log = logging.getLogger(__name__)

TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})


def now_ms() -> int:
    return int(time.time() * 1000)


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
        self._client_obj: Any = None
        self._experiments: dict[str, str] = {}
        # Test seam: called with the run id right after a batch run is created, before anything is logged to it.
        self.on_run_created: Callable[[str], None] = lambda run_id: None

    # -- MLflow plumbing ---------------------------------------------------------------------------------
    def _client(self) -> Any:
        if self._client_obj is None:
            self._client_obj = open_client(self.uri)
        return self._client_obj

    def _experiment_id(self, name: str) -> str:
        if name in self._experiments:
            return self._experiments[name]
        from mlflow.exceptions import MlflowException

        c = self._client()
        with mlflow_errors(self.uri):
            exp = c.get_experiment_by_name(name)
            if exp is None:
                try:
                    eid = c.create_experiment(name, artifact_location=(self.artifact_root / name).as_uri(),
                                              tags=cv.EXPERIMENT_TAGS)  # fmt: skip
                except MlflowException:  # created concurrently by another flow
                    exp = c.get_experiment_by_name(name)
                    if exp is None:
                        raise
                    eid = exp.experiment_id
            else:
                eid = exp.experiment_id
                for k, v in cv.EXPERIMENT_TAGS.items():  # experiments created before the tag existed
                    if exp.tags.get(k) != v:
                        c.set_experiment_tag(eid, k, v)
        self._experiments[name] = eid
        return eid

    def find_run(self, experiment: str, tag: str, value: str, field: str = "key") -> Any | None:
        """The active run of `experiment` whose tag `tag` equals `value` (quoted safely), or None."""
        eid = self._experiment_id(experiment)
        with mlflow_errors(self.uri):
            runs = self._client().search_runs([eid], filter_string=tag_equals(tag, value, field), max_results=1)
        return runs[0] if runs else None

    def _forget_client(self) -> None:
        """Rebuild the client and re-resolve experiment ids next time (a new server may be up)."""
        self._client_obj = None
        self._experiments.clear()

    def reachable(self) -> bool:
        try:
            with mlflow_errors(self.uri):
                self._client().search_experiments(max_results=1)
        except TrackingUnavailable:
            return False
        return True

    # -- runs -------------------------------------------------------------------------------------------------
    def log_run(
        self,
        *,
        experiment: str,
        key: str,
        run_name: str = "",
        params: Mapping[str, Any] = {},
        metrics: Mapping[str, float] = {},
        tags: Mapping[str, str] = {},
        datasets: Iterable[Mapping[str, Any]] = (),
        started_at: float | None = None,
        status: str = "FINISHED",
        artifacts: Mapping[str, str] = {},
        served_variant: str = "",
    ) -> str | None:
        """Log one run, exactly once per `key`; returns its run id, or None if it was buffered (or rejected).

        `started_at` (epoch seconds) is when the job began, so the run spans its job; it ends now, with `status`.
        `datasets` are `oltunes.tracking.conventions.dataset_input` dicts (``log_input``); `artifacts` are
        ``{artifact path: text}`` (a decision's explanation); `served_variant`: the variant whose logged model
        (if the zoo registered it) becomes the run's model output.
        """
        end = now_ms()
        record = {
            "op": "run",
            "experiment": experiment,
            "run_name": run_name,
            "params": {k: str(v) for k, v in params.items()},
            "metrics": {k: float(v) for k, v in metrics.items()},
            "tags": dict(tags),
            "datasets": [dict(d) for d in datasets],
            "start_ms": int(started_at * 1000) if started_at is not None else end,
            "end_ms": end,
            "status": status,
            "artifacts": dict(artifacts),
            "served_variant": served_variant,
        }
        return self._apply_or_buffer(key, record)

    def _write_run(self, key: str, rec: dict[str, Any], replay: bool) -> str:
        from mlflow.entities import Metric, Param, RunTag

        existing = self.find_run(rec["experiment"], cv.TAG_KEY, key)
        if existing is not None and existing.info.status in TERMINAL:
            return existing.info.run_id  # complete: its terminal status is the last thing written
        c = self._client()
        with mlflow_errors(self.uri):
            if existing is None:
                rid = c.create_run(
                    self._experiment_id(rec["experiment"]),
                    start_time=rec.get("start_ms"),
                    run_name=rec.get("run_name") or None,
                    tags={cv.TAG_KEY: key},
                ).info.run_id
                self.on_run_created(rid)
            else:  # half-written by a crash: complete it (every write below is idempotent)
                rid = existing.info.run_id
                log.info("completing half-written run %s (key %s)", rid, key)
        try:
            with mlflow_errors(self.uri):
                ts = int(rec.get("end_ms") or now_ms())
                c.log_batch(
                    rid,
                    metrics=[Metric(k, v, ts, 0) for k, v in rec["metrics"].items()],
                    params=[Param(k, v) for k, v in rec["params"].items()],
                    tags=[RunTag(k, v) for k, v in rec["tags"].items()],
                )
                if rec.get("datasets"):
                    c.log_inputs(rid, datasets=[cv.to_dataset_input(d) for d in rec["datasets"]])
                for path, text in rec.get("artifacts", {}).items():  # (overwritten alike when replayed)
                    c.log_text(rid, text, path)
                if rec.get("served_variant"):
                    link_served_model(self, rid, rec["served_variant"])
                # A replayed run ends when it lands: warm start reads runs by end time (see `history`).
                end = now_ms() if replay else rec.get("end_ms")
                c.set_terminated(rid, status=rec.get("status", "FINISHED"), end_time=end)
        except RecordRejected:
            with contextlib.suppress(TrackingUnavailable, RecordRejected), mlflow_errors(self.uri):
                c.delete_run(rid)  # no half-made run of a record that can never be completed
            raise
        return rid

    # -- measurements ----------------------------------------------------------------------------------------
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
        dataset: Path | None = None,
        started_at: float | None = None,
    ) -> str | None:
        """One run for one Measurement (a batch job, or one simulated job), keyed by its measurement id.

        `dataset`: the job's input file (logged with ``log_input``); `started_at`: when the job began (epoch s).
        """
        params = {**cv.decision_params(m.candidate, decision), **extra_params}
        metrics = {**cv.measurement_metrics(m, slo_ms), **advice_metrics(decision), **extra_metrics}
        tags = {**cv.measurement_tags(m, policy, decision), **(decision_tags(decision) if decision else {}),
                **extra_tags}
        if slo_ms is not None:
            params["slo_ms"] = str(slo_ms)
        return self.log_run(
            experiment=experiment or cv.experiment_for("simulation" if m.simulated else m.kind),
            key=m.measurement_id,
            run_name=run_name or f"{m.kind}-{m.job_id[:8]}",
            params=params,
            metrics=metrics,
            tags=tags,
            datasets=[cv.dataset_record(dataset, m.items)] if dataset is not None else (),
            started_at=started_at if started_at is not None else m.timestamp - m.wall_s,
            artifacts=decision_artifacts(decision) if decision is not None else {},
            served_variant=m.candidate.variant.name,
        )

    def log_failed_job(
        self,
        decision: Decision,
        reason: str,
        *,
        kind: str = "batch",
        simulated: bool = False,
        policy: str = "",
        run_name: str = "",
        extra_params: Mapping[str, Any] = {},
        dataset: Path | None = None,
        rows: int = 0,
        started_at: float | None = None,
    ) -> str | None:
        """The run of a job that failed after its decision: status FAILED, the decision as params, the reason as
        a tag, no metrics (nothing was measured, so nothing is learnt from it). One per decision."""
        tags = {**cv.job_tags(decision.job_id, kind, simulated, policy, decision), **decision_tags(decision),
                cv.TAG_FAILURE: reason[:2000]}
        return self.log_run(
            experiment=cv.experiment_for("simulation" if simulated else kind),
            key=f"failed-{decision.decision_id}",
            run_name=run_name or f"{kind}-{decision.job_id[:8]}",
            params={**cv.decision_params(decision.candidate, decision), **extra_params},
            tags=tags,
            datasets=[cv.dataset_record(dataset, rows)] if dataset is not None else (),
            started_at=started_at,
            status="FAILED",
            artifacts=decision_artifacts(decision),
        )

    def service(self, service_id: str, **kwargs: Any) -> Any:
        """The one run of a streaming service (see `oltunes.tracking.service.ServiceRun`)."""
        from oltunes.tracking.service import ServiceRun

        return ServiceRun(self, service_id, **kwargs)

    # -- buffer --------------------------------------------------------------------------------------------
    def _apply(self, key: str, rec: dict[str, Any], replay: bool = False) -> str:
        from oltunes.tracking.service import apply_service_record

        try:
            if rec["op"] == "run":
                return self._write_run(key, rec, replay)
            return apply_service_record(self, rec, replay)
        except (KeyError, TypeError, ValueError) as e:  # a malformed record: no retry will mend it
            raise RecordRejected(f"malformed tracking record ({type(e).__name__}: {e})") from e

    def _apply_or_buffer(self, key: str, rec: dict[str, Any]) -> str | None:
        self.flush()  # keep order: older buffered records land first
        if len(self.buffer):
            self.buffer.put(key, rec)
            return None
        try:
            return self._apply(key, rec)
        except TrackingUnavailable as e:
            log.warning("%s; buffered record %s on disk", e, key)
            self._forget_client()
            self.buffer.put(key, rec)
        except RecordRejected as e:
            path = self.buffer.put(key, rec)
            self.buffer.dead_letter(path, {"key": key, **rec}, str(e))
            log.error("tracking record %s rejected (%s); kept in %s", key, e, self.buffer.dead_letter_dir)
        return None

    def flush(self) -> int:
        """Replay buffered records in order; stop while MLflow is unreachable. Returns how many landed.

        A record MLflow rejects is moved to the dead-letter folder and the replay goes on with the next one.
        """
        done = 0
        for path, rec in self.buffer.items():
            try:
                self._apply(rec.get("key", ""), rec, replay=True)
            except TrackingUnavailable as e:
                log.info("%s; %d record(s) stay buffered", e, len(self.buffer))
                self._forget_client()
                break
            except RecordRejected as e:
                self.buffer.dead_letter(path, rec, str(e))
                log.error("buffered tracking record %s rejected (%s); moved to %s", path.name, e, self.buffer.dead_letter_dir)
                continue
            self.buffer.remove(path)
            done += 1
        return done

    def pending(self) -> int:
        return len(self.buffer)

    def quarantined(self) -> int:
        """Unreadable buffer files moved aside by a replay (never sent; see `DiskBuffer.quarantine`)."""
        return self.buffer.quarantined()

    def rejected(self) -> list[dict[str, Any]]:
        """Records MLflow refused, each with ``rejected.reason``."""
        return self.buffer.dead_letters()

    # -- history and registry (own modules; here so callers hold one object) ----------------------------------
    def history(self, kinds: Iterable[str] = ("batch", "streaming"), **kwargs: Any) -> list[Measurement]:
        """Every logged Measurement of these kinds, oldest first (see `oltunes.tracking.history.history`)."""
        from oltunes.tracking.history import history

        return history(self, kinds, **kwargs)

    def register_variants(self, variants: Iterable[Any], **kwargs: Any) -> dict[str, str]:
        """Zoo variants as logged ONNX models, registered per family (see `oltunes.tracking.models`)."""
        from oltunes.tracking.models import register_variants

        return register_variants(self, variants, **kwargs)
