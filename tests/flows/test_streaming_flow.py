"""The streaming flow for real: serving workers on loopback, a replayed real trace, MLflow steps, the learner."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest
import tritonclient.http as triton
from mlflow import MlflowClient

import flows.streaming_inference as streaming
from flows.streaming_inference import streaming_inference
from oltunes.config import get_settings
from oltunes.errors import ConfigError
from oltunes.launchers.service_records import read_records
from oltunes.launchers.traffic import BUNDLED_TRACE
from oltunes.tracking import Tracker
from oltunes.tracking import conventions as cv
from oltunes.tuner import Tuner
from oltunes.netaddr import free_port

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def service_run(sid: str):
    c = MlflowClient(get_settings().mlflow_uri)
    exp = c.get_experiment_by_name("oltunes-streaming")
    (run,) = c.search_runs([exp.experiment_id], f"tags.`{cv.TAG_SERVICE}` = '{sid}'")
    return c, run


def worker_pids(sid: str) -> list[int]:
    """Pids of the service's workers, oldest generation first."""
    root = get_settings().home / "streaming" / sid
    files = sorted(root.glob("*/gen-*/_run/worker.pid"), key=lambda p: int(p.parent.parent.name.removeprefix("gen-")))
    return [int(p.read_text()) for p in files]


@pytest.fixture
def loop_backends(monkeypatch):
    """The serving each run of the flow's one control loop (`run_service`) drove, by class name."""
    seen: list[str] = []
    real = streaming.run_service

    async def spy(svc, serving, first):
        seen.append(type(serving).__name__)
        return await real(svc, serving, first)

    monkeypatch.setattr(streaming, "run_service", spy)
    return seen


def test_streaming_service_logs_steps_feeds_the_learner_and_loses_nothing(settings_env, loop_backends):
    settings_env()
    out = asyncio.run(
        # a generous SLO: on a shared, loaded machine admission control would rightly refuse some (tested elsewhere)
        streaming_inference(family="cnn", slo_ms=2000.0, trace=str(BUNDLED_TRACE), speedup=20.0, duration_s=16.0,
                            control_interval_s=4.0, service_id="svc-e2e")
    )  # fmt: skip
    assert out.status == "FINISHED" and out.steps >= 2
    assert loop_backends == ["GatewayServing"]  # real workers, through the one loop
    r = out.requests
    assert r["sent"] > 100 and r["sent"] == r["ok"] + r["failed"] and r["in_flight"] == 0
    # switching workers drops nothing: the only refusals allowed are admission's 429s (an answer, on a loaded machine)
    assert set(out.failures) <= {"429"} and out.gateway_failures == {}, (out.failures, out.gateway_failures)
    # one MLflow run with one point per step
    c, run = service_run("svc-e2e")
    assert run.info.status == "FINISHED"
    steps = sorted(h.step for h in c.get_metric_history(run.info.run_id, cv.LATENCY_P99))
    assert steps == list(range(out.steps))
    assert sum(h.value for h in c.get_metric_history(run.info.run_id, "requests_ok")) <= r["ok"]
    assert run.data.params["variant"] == out.decisions[0].variant.name
    assert run.data.tags[cv.TAG_ENERGY_SOURCE] == "estimated" and run.data.tags[cv.TAG_SIMULATED] == "false"
    # what was logged is what the learner saw, each exactly once
    logged = {m.measurement_id for m in Tracker().history(kinds=("streaming",)) if m.job_id == "svc-e2e"}
    assert logged == {m.measurement_id for m in out.measurements}
    state = Tuner.load(get_settings().tuner_state_path)
    assert all(state.has_seen(i) for i in logged)
    assert all(m.kind == "streaming" and m.throughput_items_per_s > 0 for m in out.measurements)
    # every worker it started is gone
    assert worker_pids("svc-e2e") and not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in worker_pids("svc-e2e"))


def test_crashed_serving_worker_is_restarted_and_a_triton_client_sees_no_error(settings_env):
    settings_env()
    killed: list[int] = []
    port = free_port()
    answers: list[tuple[int, ...]] = []
    errors: list[str] = []
    done = threading.Event()

    def triton_client() -> None:  # knows only the service's address and the protocol
        x = np.zeros((2, 1, 8, 8), np.float32)
        c = triton.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120.0, connection_timeout=120.0)
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:  # wait for the service to come up
            try:
                if c.is_model_ready("cnn"):
                    break
            except Exception:  # not listening yet: not a request
                pass
            time.sleep(0.2)
        stop_at = time.monotonic() + 9.0  # well inside the 14 s of traffic, across the crash 3 s in
        while not done.is_set() and time.monotonic() < stop_at:
            inp = triton.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            try:
                answers.append(c.infer("cnn", [inp]).as_numpy("logits").shape)
            except Exception as e:  # any failure the client sees (geventhttpclient's HTTPConnectionClosed included)
                errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.02)

    def killer() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not killed:
            # serving: the service publishes its address once its first worker is up (a loaded machine takes seconds)
            if any(r.service_id == "svc-crash" for r in read_records(get_settings().home)):
                time.sleep(3.0)  # let traffic flow first (the first switch can come only after the 7 s interval)
                pid = worker_pids("svc-crash")[0]  # the serving worker, never one still starting
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.1)

    threading.Thread(target=killer, daemon=True).start()
    client = threading.Thread(target=triton_client)
    client.start()
    try:
        out = asyncio.run(
            streaming_inference(family="cnn", slo_ms=2000.0, trace=str(BUNDLED_TRACE), speedup=20.0, duration_s=14.0,
                                control_interval_s=7.0, service_id="svc-crash", gateway_port=port)
        )  # fmt: skip
    finally:
        done.set()
        client.join(150)
    assert killed and out.restarts >= 1
    assert out.gateway_url == f"http://127.0.0.1:{port}"
    assert errors == [] and len(answers) > 10 and set(answers) == {(2, 10)}  # across the crash, no error seen
    r = out.requests
    assert r["sent"] == r["ok"] + r["failed"] and r["in_flight"] == 0  # nothing silently lost
    assert set(out.failures) <= {"429"} and out.gateway_failures == {}, (out.failures, out.gateway_failures)  # re-sent, not lost
    assert sum(out.failures.values()) == r["failed"]
    c, run = service_run("svc-crash")
    assert max(h.value for h in c.get_metric_history(run.info.run_id, "restarts")) >= 1


def test_cancelled_service_stops_its_workers_and_closes_its_run(settings_env):
    settings_env()

    async def cancel_after(seconds: float):
        task = asyncio.create_task(
            streaming_inference(family="cnn", slo_ms=100.0, trace=str(BUNDLED_TRACE), speedup=20.0,
                                duration_s=120.0, control_interval_s=3.0, service_id="svc-cancel")
        )  # fmt: skip
        await asyncio.sleep(seconds)
        task.cancel()
        with pytest.raises(BaseException):
            await task

    t0 = time.monotonic()
    asyncio.run(cancel_after(9.0))
    assert time.monotonic() - t0 < 60
    pids = worker_pids("svc-cancel")
    assert pids and not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)
    _, run = service_run("svc-cancel")
    assert run.info.status == "KILLED"


def test_simulated_streaming_runs_the_same_loop_on_a_gpu_cluster(settings_env, shared_data, loop_backends):
    settings_env()
    out = asyncio.run(
        streaming_inference(family="resnet", launcher="simulated", slo_ms=100.0, speedup=4.0, duration_s=60.0,
                            control_interval_s=10.0, service_id="svc-sim")
    )  # fmt: skip
    assert out.steps == 6 and all(m.simulated and m.energy_source == "simulated" for m in out.measurements)
    assert loop_backends == ["SimulatedServing"]  # the event engine, through the same loop as real workers
    # the engine's requests: each one served or dropped, with its queueing measured
    r = out.requests
    assert r["sent"] == len(streaming.load_arrivals(out.trace, speedup=4.0, duration_s=60.0)) == r["ok"] + r["failed"]
    assert all(m.queueing_delay_ms is not None and m.request_latency_p99_ms >= m.latency_p50_ms for m in out.measurements)
    assert out.request_latency["p99_ms"] >= out.request_latency["p50_ms"] > 0
    c = MlflowClient(get_settings().mlflow_uri)
    (run,) = c.search_runs([c.get_experiment_by_name("oltunes-simulation").experiment_id], f"tags.`{cv.TAG_SERVICE}` = 'svc-sim'")
    assert run.data.tags[cv.TAG_SIMULATED] == "true"
    assert len(c.get_metric_history(run.info.run_id, cv.LATENCY_P99)) == 6
    assert {m.candidate.accelerator for m in out.measurements} - {"cpu"}  # GPU pools of infra/inventory.yaml


def test_one_service_serves_several_families_each_with_its_own_decision_run_and_route(settings_env):
    settings_env()
    out = asyncio.run(
        streaming_inference(models=[{"family": "cnn", "slo_ms": 2000.0}, {"family": "transformer", "slo_ms": 4000.0}],
                            trace=str(BUNDLED_TRACE), speedup=10.0, duration_s=10.0, control_interval_s=5.0,
                            service_id="svc-multi")
    )  # fmt: skip
    assert set(out.per_model) == {"cnn", "transformer"} and out.status == "FINISHED"
    for family, pm in out.per_model.items():
        assert pm["job_id"] == f"svc-multi-{family}" and pm["steps"] >= 1
        assert pm["requests"]["ok"] > 0 and pm["requests"]["sent"] == pm["requests"]["ok"] + pm["requests"]["failed"]
    assert set(out.failures) <= {"429"} and out.gateway_failures == {}, (out.failures, out.gateway_failures)
    assert {d.variant.family for d in out.decisions} == {"cnn", "transformer"}
    assert {m.job_id for m in out.measurements} == {"svc-multi-cnn", "svc-multi-transformer"}
    for family in ("cnn", "transformer"):  # one MLflow run per family
        _, run = service_run(f"svc-multi-{family}")
        assert run.info.status == "FINISHED"


def test_streaming_rejects_bad_parameters_by_name(settings_env):
    settings_env()
    with pytest.raises(ConfigError, match="'speedup'"):
        asyncio.run(streaming_inference(family="cnn", speedup=0.0, duration_s=5))
    with pytest.raises(ConfigError, match="'family'"):
        asyncio.run(streaming_inference(family="nope", duration_s=5))
    with pytest.raises(ConfigError, match="'models'"):
        asyncio.run(streaming_inference(family="cnn", models=[{"family": "cnn", "slo_ms": 10}], duration_s=5))
    with pytest.raises(ConfigError, match="'models.0.slo_ms'"):
        asyncio.run(streaming_inference(models=[{"family": "cnn", "slo_ms": -1}], duration_s=5))
    with pytest.raises(ConfigError, match="non-loopback"):  # no token: refused before anything starts
        asyncio.run(streaming_inference(family="cnn", duration_s=5, gateway_host="0.0.0.0"))
