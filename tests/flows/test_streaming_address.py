"""The streaming service as a service: no replay, its published address reachable by a real client, its address in
the log, the Prefect artifact, the MLflow tag and `oltunes services`; a cancel (SIGTERM) logged at INFO."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.http as triton
from mlflow import MlflowClient

from flows.streaming_inference import streaming_inference
from oltunes.config import get_settings
from oltunes.launchers.service_records import ServiceRecord, read_records
from oltunes.launchers.traffic import BUNDLED_TRACE
from oltunes.tracking import conventions as cv

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def wait_record(sid: str, done: threading.Event, timeout_s: float = 150) -> ServiceRecord | None:
    deadline = time.monotonic() + timeout_s
    while not done.is_set() and time.monotonic() < deadline:
        for rec in read_records(get_settings().home):
            if rec.service_id == sid:
                return rec
        time.sleep(0.2)
    return None


def services_json() -> list[dict]:
    """`oltunes services --json`, as a user runs it (a separate process on the same OLTUNES_HOME)."""
    r = subprocess.run([sys.executable, "-c", "from oltunes.cli import app; app()", "services", "--json"],
                       capture_output=True, text=True, timeout=120, env={**os.environ})  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def run_logs(flow_run_id: str) -> list[tuple[int, str]]:
    """The run's log lines as the API holds them (what the UI and `--watch` show)."""
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # logs reach the API in batches: send what is queued
    return asyncio.run(_run_logs(flow_run_id))


async def _run_logs(flow_run_id: str) -> list[tuple[int, str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    async with get_client() as c:
        logs = await c.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200)
    return [(entry.level, entry.message) for entry in logs]


def test_a_service_without_replay_serves_a_triton_client_at_its_published_address(settings_env):
    settings_env()
    sid = "svc-noreplay"
    seen: dict = {}
    done = threading.Event()

    def client() -> None:  # knows nothing but what the service published
        rec = wait_record(sid, done)
        if rec is None:
            return
        seen["record"] = rec
        c = triton.InferenceServerClient(rec.url.removeprefix("http://"), network_timeout=60.0)
        seen["ready"] = c.is_model_ready("cnn")
        x = np.zeros((2, 1, 8, 8), np.float32)
        seen["answers"] = 0
        stop_at = time.monotonic() + 10  # well inside the service's 40 s
        while time.monotonic() < stop_at and not done.is_set():
            inp = triton.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            seen["answers"] += c.infer("cnn", [inp]).as_numpy("logits").shape == (2, 10)
            time.sleep(0.02)
        seen["listed"] = services_json()  # while it still serves

    t = threading.Thread(target=client)
    t.start()
    try:
        out = asyncio.run(streaming_inference(family="cnn", slo_ms=2000.0, replay=False, expected_rps=20.0,
                                              duration_s=40.0, control_interval_s=5.0, service_id=sid))  # fmt: skip
    finally:
        done.set()
        t.join(150)
    rec = seen["record"]
    assert seen["ready"] and seen["answers"] > 10
    assert rec.url == out.gateway_url and rec.url.startswith("http://127.0.0.1:") and rec.models == ["cnn"]
    (listed,) = [s for s in seen["listed"] if s["service_id"] == sid]
    assert listed["state"] == "serving" and listed["endpoints"]["cnn infer"] == f"{rec.url}/v2/models/cnn/infer"
    # no replay: what was served and measured is the real client's traffic, nothing else
    assert out.trace == "" and out.status == "FINISHED"
    assert 0 < out.requests["ok"] <= seen["answers"] and out.steps >= 1
    assert all(m.kind == "streaming" and m.items > 0 for m in out.measurements)
    # the address is on the MLflow run and in the Prefect artifact; the record is gone once the service stopped
    c = MlflowClient(get_settings().mlflow_uri)
    exp = c.get_experiment_by_name("oltunes-streaming")
    (run,) = c.search_runs([exp.experiment_id], f"tags.`{cv.TAG_SERVICE}` = '{sid}'")
    assert run.data.tags[cv.TAG_SERVICE_URL] == rec.url
    from prefect.artifacts import Artifact

    art = Artifact.get(f"service-{sid}")
    assert art is not None and rec.url in art.data and "/v2/models/cnn/infer" in art.data
    assert sid not in {r.service_id for r in read_records(get_settings().home)}
    assert any(rec.url in msg and level == 20 for level, msg in run_logs(rec.flow_run_id))


def test_a_cancelled_service_logs_nothing_above_info(settings_env):
    """A deployment's cancel (the run Cancelling, then SIGTERM): the service stops cleanly, its last words at INFO
    (task runs started after the cancel were aborted by the API and logged at ERROR)."""
    settings_env()
    sid = "svc-sigterm"
    done = threading.Event()
    seen: dict = {}

    def terminate() -> None:  # what `prefect flow-run cancel` does: the run goes Cancelling, its process gets SIGTERM
        from prefect.client.orchestration import get_client
        from prefect.states import Cancelling

        rec = wait_record(sid, done)
        if rec is not None:
            seen["record"] = rec
            time.sleep(3)
            with get_client(sync_client=True) as c:
                c.set_flow_run_state(rec.flow_run_id, Cancelling(), force=True)
            os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=terminate)
    t.start()
    try:
        out = asyncio.run(streaming_inference(family="cnn", slo_ms=2000.0, trace=str(BUNDLED_TRACE), speedup=10.0,
                                              duration_s=120.0, control_interval_s=2.0, service_id=sid))  # fmt: skip
    finally:
        done.set()
        t.join(60)
    assert out.status == "KILLED" and "record" in seen
    logs = run_logs(seen["record"].flow_run_id)
    assert [m for level, m in logs if level > 20] == []
    assert any("cancelled" in m for _, m in logs)
    assert sid not in {r.service_id for r in read_records(get_settings().home)}
