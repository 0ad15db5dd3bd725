"""Shadow requests on the real path: the streaming service's gateway serving (`GatewayServing`), its launcher
starting both the primary and the shadow worker, a Triton client through the gateway.

The primary runs ``cnn-s-fp32`` and the shadow ``cnn-m-fp32``, whose answers differ: a shadow answer reaching the
client would be seen. Local processes always; Docker containers where an engine is available (skipped as the
other Docker tests are otherwise).
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import onnxruntime as ort
import psutil
import pytest
import tritonclient.http as triton

from oltunes.config import REPO_ROOT
from oltunes.gateway.shadow import ShadowBudget
from oltunes.inventory import load_inventory
from oltunes.launchers import Launcher
from oltunes.launchers.gateway_serving import GatewayServing
from oltunes.launchers.local import LocalLauncher
from oltunes.launchers.serving import ServiceSetup
from oltunes.types import ClusterState, ColocationGroup
from tests.gateway.test_gateway import decisions_for
from tests.launchers.test_docker_engine import docker_engine, worker_image  # noqa: F401 -- fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def shadowed_service(launcher: Launcher, zoo, tmp_path) -> dict:
    """Primary and shadow behind one gateway, a Triton client for ~4 s inside one control interval; what it saw."""
    job, (primary, candidate) = decisions_for(zoo, ["cnn-s-fp32", "cnn-m-fp32"])
    shadow = candidate.model_copy(update={"job_id": "gw-test-shadow",
                                          "group": ColocationGroup(pool=candidate.pool, device=0, members=("gw-test-shadow",))})
    cluster = ClusterState(pools=load_inventory(REPO_ROOT / "infra/inventory.local.yaml"))
    setup = ServiceSetup(jobs=[job], arrivals=np.empty(0), duration_s=60, control_interval_s=6.0, cluster=cluster,
                         workdir=tmp_path, replay=False)  # fmt: skip
    serving = GatewayServing(launcher, setup)
    x = np.random.default_rng(1).normal(size=(4, 1, 8, 8)).astype(np.float32)
    expected = {d.variant.name: ort.InferenceSession(str(d.variant.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                for d in (primary, candidate)}  # fmt: skip
    answers: list[np.ndarray] = []
    errors: list[str] = []

    def client(url: str) -> None:  # an ordinary Triton client: knows only the address and the protocol
        c = triton.InferenceServerClient(url.removeprefix("http://"), network_timeout=60.0)
        stop_at = time.monotonic() + 4.0
        while time.monotonic() < stop_at:
            inp = triton.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=len(answers) % 2 == 0)
            try:
                answers.append(c.infer("cnn", [inp]).as_numpy("logits"))
            except Exception as e:  # noqa: BLE001 -- any failure the client sees
                errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.01)

    async def main() -> dict:
        await serving.start()
        try:
            await serving.switch(0, primary)
            how = await serving.shadow(0, shadow, ShadowBudget(share=0.5, max_rps=1000))
            mirror = serving.gateway.shadows["cnn"]
            pid = serving.models[0].shadow.handle.pid
            t = threading.Thread(target=client, args=(serving.url,))
            t.start()
            (interval,) = await serving.measure_interval(asyncio.Event())
            await asyncio.to_thread(t.join)
        finally:
            report = await serving.drain()
        return {"how": how, "interval": interval, "counts": dict(mirror.counts), "report": report, "pid": pid}

    out = asyncio.run(main())
    out.update(answers=answers, errors=errors, expected=expected, shadow=shadow, primary=primary)
    return out


def check(out: dict) -> None:
    want, other = out["expected"]["cnn-s-fp32"], out["expected"]["cnn-m-fp32"]
    assert not np.allclose(want, other, atol=1e-3)  # the shadow's answers can be told apart from the primary's
    assert out["errors"] == [] and len(out["answers"]) > 20
    assert all(np.allclose(a, want, atol=1e-4) for a in out["answers"])  # every client got the primary's answer
    c = out["counts"]
    assert c.get("failed", 0) == 0 and c["ok"] >= len(out["answers"]) // 2 - 2  # half of them were mirrored and answered
    iv = out["interval"]
    assert iv is not None and iv.measurement.purpose == "serve" and iv.measurement.candidate.key == out["primary"].candidate.key
    s = iv.shadow
    assert s is not None and s.purpose == "shadow" and s.job_id == "gw-test-shadow"
    assert s.decision_id == out["shadow"].decision_id and s.candidate.key == out["shadow"].candidate.key
    assert s.items >= c["ok"] * 4 // 2 and s.throughput_items_per_s > 0 and s.energy_j_per_item > 0
    assert iv.metrics["shadow_requests_ok"] == c["ok"]
    assert out["report"].gateway_failures == {}
    assert "shadowing" in out["how"]


def test_a_local_shadow_worker_sees_mirrored_requests_and_the_triton_client_only_the_primary(built_zoo, tmp_path):
    out = shadowed_service(LocalLauncher(), built_zoo, tmp_path)
    check(out)
    assert not (psutil.pid_exists(out["pid"]) and psutil.Process(out["pid"]).status() != "zombie")  # stopped with the service


def test_a_docker_shadow_worker_is_started_measured_and_removed(built_zoo, worker_image, tmp_path):  # noqa: F811
    from oltunes.launchers.docker_launcher import DockerLauncher

    out = shadowed_service(DockerLauncher(image=worker_image), built_zoo, tmp_path)
    check(out)
