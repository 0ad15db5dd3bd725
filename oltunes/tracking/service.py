"""The single MLflow run of a streaming service, at a cost per step that does not grow with the steps.

The run is created when the service starts (so it spans the service) and its id is held: no step searches for
it. Steps are logged in chunks of up to `steps_per_batch` (or every `flush_s` seconds): one ``log_batch`` with the
chunk's step metrics and one JSON-lines artifact ``oltunes/steps/<first>-<last>.jsonl`` holding the chunk's
measurement records (what `oltunes.tracking.history` rebuilds the learner from). Each chunk is one buffered
record, replayed exactly once: the metric ``oltunes.last_step`` is written with the chunk's metrics, after its
artifact, so a replay skips a chunk whose steps already landed.

Steps not yet flushed live in memory until the next chunk; a crash loses them from MLflow only (the learner
observed them already, and the tuner's state is the source of truth for learning).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from oltunes.tracking import conventions as cv
from oltunes.tracking.client import mlflow_errors
from oltunes.tracking.decisions import advice_metrics, decision_artifacts, decision_tags, link_served_model
from oltunes.types import Candidate, Decision, Measurement

_MAX_METRICS_PER_BATCH = 900  # MLflow's log_batch takes at most 1000 metrics


class ServiceRun:
    """Step-wise logging for one streaming service (`Tracker.service`)."""

    def __init__(
        self,
        tracker: Any,
        service_id: str,
        *,
        candidate: Candidate | None = None,
        experiment: str | None = None,
        run_name: str = "",
        params: Mapping[str, Any] = {},
        tags: Mapping[str, str] = {},
        datasets: list[dict[str, Any]] = (),
        steps_per_batch: int = 10,
        flush_s: float = 60.0,
        system_metrics_s: float | None = 10.0,
    ):
        self.tracker = tracker
        self.service_id = service_id
        self.experiment = experiment or cv.experiment_for("streaming")
        self.run_name = run_name or service_id
        self.params = dict(cv.decision_params(candidate)) if candidate is not None else {}
        self.params.update({k: str(v) for k, v in params.items()})
        self.tags = dict(tags)
        self.datasets = [dict(d) for d in datasets]
        self.steps_per_batch = max(1, int(steps_per_batch))
        self.flush_s = flush_s
        self._pending: list[dict[str, Any]] = []
        self._recent: dict[str, None] = {}  # measurement ids logged lately: a step sent twice counts once
        self._decision_id = ""  # the decision whose explanation was logged last
        self._last_flush = time.monotonic()
        self.start_ms = int(time.time() * 1000)
        self.run_id: str | None = self._send(f"{service_id}/start", self._rec("start"))
        self._monitor = self._system_metrics(system_metrics_s)

    def _system_metrics(self, every_s: float | None) -> Any:
        """MLflow's system metrics (CPU, memory, disk, network; GPU where NVML exists) of this host, on the run."""
        if every_s is None or self.run_id is None:
            return None
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(self.run_id, sampling_interval=every_s, tracking_uri=self.tracker.uri)
        monitor.start()
        return monitor

    def _rec(self, op: str) -> dict[str, Any]:
        return {
            "op": op, "experiment": self.experiment, "service_id": self.service_id, "run_name": self.run_name,
            "params": self.params, "tags": self.tags, "start_ms": self.start_ms, "run_id": getattr(self, "run_id", None),
            "datasets": self.datasets,
        }  # fmt: skip

    def _send(self, key: str, rec: dict[str, Any]) -> str | None:
        rid = self.tracker._apply_or_buffer(key, rec)
        if rid is not None:
            self.run_id = rid
        return rid

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
        """Queue one control interval's Measurement as step `step`; a full chunk is logged at once.

        Returns the run id when a chunk was sent and landed, else None (queued, or buffered on disk).
        """
        if m.measurement_id in self._recent:
            return None
        self._recent[m.measurement_id] = None
        if len(self._recent) > 4096:
            del self._recent[next(iter(self._recent))]
        mtags = cv.measurement_tags(m, policy, decision)
        new_decision = decision is not None and decision.decision_id != self._decision_id
        if new_decision:  # the first decision, or a switch: its explanation goes with this step
            self._decision_id = decision.decision_id
        self._pending.append({
            "step": int(step),
            "ts": int(time.time() * 1000),
            "metrics": {**cv.measurement_metrics(m, slo_ms), **advice_metrics(decision),
                        **{k: float(v) for k, v in extra_metrics.items()}},
            "record": mtags[cv.TAG_MEASUREMENT],
            # Run-level tags that may change over the service's life keep their latest value.
            "tags": {k: mtags[k] for k in (cv.TAG_ENERGY_SOURCE, cv.TAG_SIMULATED, cv.TAG_JOB)}
            | ({cv.TAG_POLICY: policy} if policy else {}) | (decision_tags(decision) if new_decision else {}),
            "artifacts": decision_artifacts(decision) if new_decision else {},
            "served_variant": decision.candidate.variant.name if new_decision else "",
        })  # fmt: skip
        n_metrics = sum(len(s["metrics"]) + 1 for s in self._pending)
        full = len(self._pending) >= self.steps_per_batch or n_metrics + 30 > _MAX_METRICS_PER_BATCH
        if full or time.monotonic() - self._last_flush >= self.flush_s:
            return self.flush()
        return None

    def flush(self) -> str | None:
        """Send the queued steps as one chunk (no-op when none are queued)."""
        if not self._pending:
            return None
        steps, self._pending = self._pending, []
        self._last_flush = time.monotonic()
        rec = self._rec("steps")
        rec.update(first=steps[0]["step"], last=steps[-1]["step"], steps=steps)
        return self._send(f"{self.service_id}/steps/{rec['first']}-{rec['last']}", rec)

    def set_tags(self, tags: Mapping[str, str]) -> str | None:
        """Tag the run now (the service's address, known once its gateway listens); buffered like every record."""
        self.tags.update(tags)
        return self._send(f"{self.service_id}/tags", self._rec("tags"))

    def end(self, status: str = "FINISHED") -> str | None:
        """Flush the queued steps and end the run with `status` (FINISHED, FAILED or KILLED)."""
        self.flush()
        if self._monitor is not None:
            self._monitor.finish()
            self._monitor = None
        rec = self._rec("end")
        rec["status"] = status
        return self._send(f"{self.service_id}/end", rec)


def _resolve(tracker: Any, rec: dict[str, Any]) -> str:
    """The service's run: the held id, else found by service id, else created (replay after an outage)."""
    if rec.get("run_id"):
        return rec["run_id"]
    run = tracker.find_run(rec["experiment"], cv.TAG_SERVICE, rec["service_id"], field="service_id")
    if run is not None:
        return run.info.run_id
    from mlflow.entities import Param

    c = tracker._client()
    with mlflow_errors(tracker.uri):
        rid = c.create_run(
            tracker._experiment_id(rec["experiment"]), start_time=rec.get("start_ms"),
            run_name=rec.get("run_name") or None, tags={cv.TAG_SERVICE: rec["service_id"], **rec.get("tags", {})},
        ).info.run_id  # fmt: skip
        # Params are immutable in MLflow: they describe the service's first decision; later switches show in
        # the step metrics and each step's measurement record.
        if rec.get("params"):
            c.log_batch(rid, params=[Param(k, v) for k, v in rec["params"].items()])
        if rec.get("datasets"):
            c.log_inputs(rid, datasets=[cv.to_dataset_input(d) for d in rec["datasets"]])
    return rid


def apply_service_record(tracker: Any, rec: dict[str, Any], replay: bool) -> str:
    """Apply one buffered service record (``start``, ``tags``, ``steps`` or ``end``); idempotent under replay."""
    from mlflow.entities import Metric, RunTag

    rid = _resolve(tracker, rec)
    c = tracker._client()
    with mlflow_errors(tracker.uri):
        if rec["op"] == "end":
            c.set_terminated(rid, status=rec.get("status", "FINISHED"))
        elif rec["op"] == "steps":
            last = int(rec["last"])
            if replay and c.get_run(rid).data.metrics.get(cv.LAST_STEP, -1) >= last:
                return rid  # this chunk already landed
            steps = rec["steps"]
            c.log_text(rid, "".join(s["record"] + "\n" for s in steps), cv.steps_chunk(int(rec["first"]), last))
            metrics = [Metric(k, v, s["ts"], s["step"]) for s in steps for k, v in s["metrics"].items()]
            metrics.append(Metric(cv.LAST_STEP, float(last), steps[-1]["ts"], last))
            tags = {k: v for s in steps for k, v in s["tags"].items()}  # the latest value wins
            for s in steps:  # each new decision's explanation and the model it serves (before the last step lands)
                for path, text in s.get("artifacts", {}).items():
                    c.log_text(rid, text, path)
                if s.get("served_variant"):
                    link_served_model(tracker, rid, s["served_variant"])
            c.log_batch(rid, metrics=metrics, tags=[RunTag(k, v) for k, v in tags.items()])
        elif rec["op"] == "tags":
            c.log_batch(rid, tags=[RunTag(k, v) for k, v in rec["tags"].items()])
        elif rec["op"] == "start":
            if c.get_run(rid).info.status != "RUNNING":  # a service restarted under its id: live again
                c.update_run(rid, status="RUNNING")
        else:
            raise ValueError(f"unknown service record op {rec['op']!r}")
    return rid


def parse_chunk(text: str) -> list[Measurement]:
    return [cv.parse_measurement(line) for line in text.splitlines() if line.strip()]
