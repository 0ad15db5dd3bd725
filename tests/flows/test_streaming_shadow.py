"""Shadow requests through the streaming flow for real: the tuner names a trial, the flow starts its worker under
its own lease, the gateway mirrors a share of the live requests to it, the learner observes it tagged shadow, and
MLflow records what was shadowed; a Triton client through the gateway sees nothing of it."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import psutil
import pytest
import tritonclient.http as triton

from flows.streaming_inference import streaming_inference
from flows.streaming_service import SHADOW_TAG
from oltunes.config import get_settings
from oltunes.launchers.service_records import read_records
from oltunes.launchers.traffic import BUNDLED_TRACE
from oltunes.netaddr import free_port
from oltunes.tuner import Tuner
from tests.flows.test_streaming_flow import service_run

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


def shadow_pids(sid: str) -> list[int]:
    root = get_settings().home / "streaming" / sid
    return [int(p.read_text()) for p in root.glob("*/shadow-*/_run/worker.pid")]


def test_the_flow_shadows_the_tuners_trial_and_the_learner_sees_it_tagged_shadow(settings_env):
    settings_env()
    port = free_port()
    answers: list[tuple[int, ...]] = []
    errors: list[str] = []
    done = threading.Event()

    def triton_client() -> None:
        x = np.zeros((2, 1, 8, 8), np.float32)
        c = triton.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120.0, connection_timeout=120.0)
        deadline = time.monotonic() + 150
        while not done.is_set() and time.monotonic() < deadline:  # until the service publishes its address
            if any(r.service_id == "svc-shadow" for r in read_records(get_settings().home)):
                break
            time.sleep(0.2)
        stop_at = time.monotonic() + 10.0  # inside the service's 16 s of traffic: never across its shutdown
        while not done.is_set() and time.monotonic() < stop_at:
            inp = triton.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            try:
                answers.append(c.infer("cnn", [inp]).as_numpy("logits").shape)
            except Exception as e:  # noqa: BLE001 -- any failure the client sees
                errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.05)

    client = threading.Thread(target=triton_client)
    client.start()
    try:
        out = asyncio.run(
            streaming_inference(family="cnn", slo_ms=2000.0, trace=str(BUNDLED_TRACE), speedup=20.0, duration_s=16.0,
                                control_interval_s=4.0, service_id="svc-shadow", gateway_port=port,
                                shadow_share=0.25, shadow_max_rps=50.0)
        )  # fmt: skip
    finally:
        done.set()
        client.join(30)
    assert out.status == "FINISHED" and errors == [] and answers, errors[:3]
    assert set(answers) == {(2, 10)}
    assert set(out.failures) <= {"429"} and out.gateway_failures == {}
    shadowed = out.per_model["cnn"]["shadowed"]
    assert shadowed, "the tuner named no trial to shadow"
    # measured, tagged shadow, under the shadow's own job; none of them is the primary's
    sm = out.shadow_measurements
    assert sm and all(m.purpose == "shadow" and m.job_id == "svc-shadow-shadow" and m.items > 0 for m in sm)
    assert all(m.purpose == "serve" for m in out.measurements)
    assert {f"{m.candidate.key} on device 0" for m in sm} <= set(shadowed)
    # each observed by the learner, once (the ids are unique; the state has seen them)
    assert len({m.measurement_id for m in sm}) == len(sm)
    state = Tuner.load(get_settings().tuner_state_path)
    assert all(state.has_seen(m.measurement_id) for m in sm)
    # MLflow: what was shadowed, and its measurements as step metrics
    c, run = service_run("svc-shadow")
    assert run.data.params["shadow_share"] == "0.25" and run.data.tags[SHADOW_TAG] in {*shadowed, "none"}
    assert len(c.get_metric_history(run.info.run_id, "shadow_latency_p99_ms")) == len(sm)
    # the shadow workers are gone with the service
    pids = shadow_pids("svc-shadow")
    assert pids and not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)


def test_shadow_share_zero_runs_no_shadow(settings_env):
    settings_env()
    out = asyncio.run(
        streaming_inference(family="cnn", slo_ms=2000.0, trace=str(BUNDLED_TRACE), speedup=20.0, duration_s=6.0,
                            control_interval_s=3.0, service_id="svc-noshadow", shadow_share=0.0)
    )  # fmt: skip
    assert out.status == "FINISHED" and out.steps >= 1
    assert out.shadow_measurements == [] and out.per_model["cnn"]["shadowed"] == [] and shadow_pids("svc-noshadow") == []


def test_a_bad_shadow_share_is_refused_by_name(settings_env):
    from oltunes.errors import ConfigError

    settings_env()
    with pytest.raises(ConfigError, match="'shadow_share'"):
        asyncio.run(streaming_inference(family="cnn", duration_s=5, shadow_share=0.9))
    with pytest.raises(ConfigError, match="'shadow_max_rps'"):
        asyncio.run(streaming_inference(family="cnn", duration_s=5, shadow_max_rps=0))
