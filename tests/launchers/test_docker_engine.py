"""The Docker launcher against a real engine and the CPU worker image built here with no registry.

Batch and serve workers run in containers through the launcher, exactly as flows run them; every test checks the
container is gone afterwards. Without an engine these skip with the reason (a failure when ``CI=true``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from oltunes.errors import InputRejected, MissingDependency, WorkerError
from oltunes.inventory import CATALOG
from oltunes.launchers import WorkerSpec, docker_adaptor
from oltunes.launchers.batch_job import measurement_from_results
from oltunes.launchers.docker_launcher import DockerLauncher
from oltunes.types import Candidate, JobSpec, Pool
from oltunes.worker.batch import read_predictions
from tests.infra.engine import build_image, start_engine

pytestmark = pytest.mark.slow

CPU_POOL = Pool(name="cpu-1core", accelerator=CATALOG["cpu"], count=1, cpu_set=(0,))


@pytest.fixture(scope="session")
def docker_engine():
    engine = start_engine()
    mp = pytest.MonkeyPatch()
    mp.setenv("DOCKER_HOST", engine.docker_host)  # the reaper and every client inherit it
    yield engine
    mp.undo()
    engine.stop()


@pytest.fixture(scope="session")
def worker_image(docker_engine):
    return build_image(docker_engine.docker_host)


@pytest.fixture
def client(docker_engine):
    c = docker_adaptor.connect(docker_engine.docker_host)
    yield c
    c.close()


def make_spec(variant, tmp_path, mode="batch", data=None, pool=CPU_POOL, job_id="job-docker-1", **kw) -> WorkerSpec:
    cand = Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=variant, batch_size=16, concurrency=1)
    return WorkerSpec(
        mode=mode,
        job=JobSpec(job_id=job_id, family="cnn", slo_ms=200, items=600),
        candidate=cand,
        pool=pool,
        run_dir=tmp_path / "run",
        decision_id="dec-42",
        input_path=data if data is not None and mode == "batch" else None,
        output_dir=tmp_path / "out" if mode == "batch" else None,
        shard_size=200,
        **kw,
    )


def containers_of(client, job_id: str) -> list:
    # ignore_removed: a container removed between the listing and its inspect is gone, not an error (404)
    return client.containers.list(all=True, ignore_removed=True, filters={"label": f"oltunes.job_id={job_id}"})


def eventually(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    pytest.fail(f"not within {timeout_s:.0f} s: {what}")


def test_batch_job_runs_in_a_container_and_is_measured(small_zoo, worker_image, client, tmp_path):
    variant, data = small_zoo
    spec = make_spec(variant, tmp_path, data=data)
    launcher = DockerLauncher(image=worker_image)
    handle = launcher.start(spec)
    result = launcher.wait(handle, timeout_s=600)

    assert result.returncode == 0 and result.report["items"] == 600 and result.report["complete"]
    assert result.report["threads"] == 1  # the pool's one core
    preds = read_predictions(spec.output_dir)
    assert sorted(preds.column("id").to_pylist()) == list(range(600))  # every item once
    t = result.telemetry
    assert t is not None and t.cpu_time_s == pytest.approx(result.report["cpu_time_s"]) and t.energy_j > 0
    m = measurement_from_results(spec.job, spec.candidate, [result])
    assert m is not None and m.items == 600 and m.latency_p99_ms >= m.latency_p50_ms > 0 and not m.simulated
    assert spec.log_path.is_file()  # the container's output, saved before removal
    assert containers_of(client, spec.job.job_id) == []
    # Outputs belong to the caller, not to some container user.
    assert {p.stat().st_uid for p in spec.output_dir.glob("part-*.parquet")} == {os.getuid()}


def test_serve_worker_in_a_container_answers_and_is_confined(small_zoo, worker_image, client, tmp_path):
    variant, _ = small_zoo
    spec = make_spec(variant, tmp_path, mode="serve", job_id="job-docker-serve")
    launcher = DockerLauncher(image=worker_image)
    handle = launcher.start(spec)
    try:
        launcher.ready(handle, timeout_s=120)
        r = httpx.post(f"{handle.url}/infer", json={"inputs": [[0.1] * 64] * 4}, timeout=30)
        assert r.status_code == 200, r.text
        assert len(r.json()["predictions"]) == 4

        (c,) = containers_of(client, spec.job.job_id)
        hc = c.attrs["HostConfig"]
        assert hc["NetworkMode"] == "host" and hc["ReadonlyRootfs"] and hc["CapDrop"] == ["ALL"]
        assert hc["CpusetCpus"] == "0" and hc["NanoCpus"] == 1_000_000_000 and hc["Memory"] == 4096 * 2**20
        assert c.labels["oltunes.decision_id"] == "dec-42" and c.labels["oltunes.pool"] == "cpu-1core"
        binds = {b.split(":")[0]: b.split(":")[-1] for b in hc["Binds"]}
        assert binds == {os.path.dirname(variant.path): "ro", str(spec.run_dir.resolve()): "rw"}
        assert not any("docker.sock" in b for b in hc["Binds"])
        # The image's HEALTHCHECK probes the worker's port (set by the launcher): the engine sees it healthy.
        eventually(lambda: (c.reload() or c.attrs["State"]["Health"]["Status"]) == "healthy", 90, "container healthy")
    finally:
        rc = launcher.stop(handle, grace_s=10)
    assert rc == 0  # SIGTERM reached the worker through the init process: a clean shutdown
    assert containers_of(client, spec.job.job_id) == []
    assert "Uvicorn running" in spec.log_path.read_text() or spec.log_path.stat().st_size > 0


def test_a_timed_out_or_stopped_batch_is_removed(small_zoo, worker_image, client, tmp_path):
    variant, data = small_zoo
    launcher = DockerLauncher(image=worker_image)
    spec = make_spec(variant, tmp_path, data=data, job_id="job-docker-timeout")
    handle = launcher.start(spec)
    with pytest.raises(WorkerError, match="did not finish in 0.01 s and was stopped"):
        launcher.wait(handle, timeout_s=0.01)
    assert containers_of(client, spec.job.job_id) == []
    assert not launcher.alive(handle)


def test_a_worker_refusing_its_input_reports_why_and_is_removed(small_zoo, worker_image, client, tmp_path):
    variant, data = small_zoo
    bad = tmp_path / "in" / "broken.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"not parquet")
    spec = make_spec(variant, tmp_path, data=data, job_id="job-docker-fail").model_copy(update={"input_path": bad})
    launcher = DockerLauncher(image=worker_image)
    # exit 2 in the container is bad input, as with the local launcher: InputRejected, which is never retried
    with pytest.raises(InputRejected, match=r"rejected its input: dataset .*broken.parquet cannot be read"):
        launcher.wait(launcher.start(spec), timeout_s=300)
    assert containers_of(client, spec.job.job_id) == []


KILLED_PARENT = """
import json, sys, time
from pathlib import Path
from oltunes.inventory import CATALOG
from oltunes.launchers import WorkerSpec
from oltunes.launchers.docker_launcher import DockerLauncher
from oltunes.types import Candidate, JobSpec, Pool, Variant

variant = Variant.model_validate_json(sys.argv[1])
pool = Pool(name="cpu-1core", accelerator=CATALOG["cpu"], count=1, cpu_set=(0,))
cand = Candidate(pool=pool.name, accelerator="cpu", variant=variant, batch_size=4)
spec = WorkerSpec(mode="serve", job=JobSpec(job_id="job-docker-orphan", family="cnn", slo_ms=200, items=1),
                  candidate=cand, pool=pool, run_dir=Path(sys.argv[2]))
h = DockerLauncher(image=sys.argv[3]).start(spec)
print(h.state["container"].id, flush=True)
time.sleep(600)
"""


def test_a_killed_flow_leaves_no_container_behind(small_zoo, worker_image, client, tmp_path):
    variant, _ = small_zoo
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_PARENT, variant.model_dump_json(), str(tmp_path / "run"), worker_image],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        cid = proc.stdout.readline().strip()
        assert cid, "the child started no container"
        assert [c.id for c in containers_of(client, "job-docker-orphan")] == [cid]
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no finally, no atexit: only the reaper can clean up
        proc.wait()
    eventually(lambda: containers_of(client, "job-docker-orphan") == [], 60, "the orphan container removed")


def test_engine_errors_say_what_to_do(small_zoo, docker_engine, tmp_path):
    variant, data = small_zoo
    with pytest.raises(MissingDependency, match=r"no Docker engine is reachable at unix:///nonexistent.*dockerd\.sh"):
        docker_adaptor.connect("unix:///nonexistent/docker.sock", timeout_s=2)
    with pytest.raises(MissingDependency, match=r"image oltunes-worker-cpu:absent is not in the engine.*build-cpu-image"):
        DockerLauncher(image="oltunes-worker-cpu:absent").start(make_spec(variant, tmp_path, data=data))
    gpu = Pool(name="a100-east", accelerator=CATALOG["a100"], count=1, device_ids=("GPU-1111",))
    with pytest.raises(MissingDependency, match=r"pool a100-east asks for GPUs \['GPU-1111'\].*no NVIDIA runtime"):
        DockerLauncher(image="oltunes-worker-cpu:latest").start(make_spec(variant, tmp_path, data=data, pool=gpu))
    assert json.loads(json.dumps(docker_adaptor.connect().info()["Runtimes"]))  # the engine itself is fine


def test_the_cpu_image_holds_the_worker_only_and_runs_it_unprivileged(worker_image, client):
    probe = (
        "import importlib.util as u, os, json; "
        "print(json.dumps({'absent': [m for m in ('torch', 'prefect', 'mlflow', 'river', 'sklearn', 'docker') "
        "if u.find_spec(m) is None], 'ort': u.find_spec('onnxruntime') is not None, 'uid': os.getuid()}))"
    )
    out = client.containers.run(worker_image, entrypoint=["python3", "-c", probe], remove=True, network_mode="none")
    got = json.loads(out.decode().strip().splitlines()[-1])
    assert got == {"absent": ["torch", "prefect", "mlflow", "river", "sklearn", "docker"], "ort": True, "uid": 10001}
