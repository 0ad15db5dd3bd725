"""Docker seam (no engine on this machine: the request it would build, and a clear refusal) and the simulated launcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from oltunes.errors import ConfigError, MissingDependency
from oltunes.inventory import CATALOG
from oltunes.launchers import Launcher, WorkerSpec, pool_cores
from oltunes.launchers import docker_adaptor
from oltunes.launchers.local import worker_argv
from oltunes.types import Candidate, JobSpec, Pool, Variant

GPU_POOL = Pool(name="a100-east", accelerator=CATALOG["a100"], count=2, device_ids=("GPU-1111", "GPU-2222"))
VARIANT = Variant(family="cnn", name="cnn-s-fp32", size="s", accuracy=0.9, path="/models/cnn-s-fp32.onnx")


def spec(pool: Pool, mode="batch", tmp: Path = Path("/tmp/x"), **kw) -> WorkerSpec:
    cand = Candidate(pool=pool.name, accelerator=pool.accelerator.name, variant=VARIANT, batch_size=16, concurrency=2)
    base = dict(
        mode=mode,
        job=JobSpec(family="cnn", slo_ms=100, items=1000),
        candidate=cand,
        pool=pool,
        run_dir=tmp / "run",
        input_path=tmp / "in" / "data.parquet",
        output_dir=tmp / "out",
    )
    return WorkerSpec(**{**base, **kw})


def test_docker_request_passes_gpus_by_uuid_with_the_gpu_capability(tmp_path):
    s = spec(GPU_POOL, tmp=tmp_path)
    kw = docker_adaptor.run_kwargs(s, ["oltunes", "worker", "batch"], image="img:1")
    (req,) = kw["device_requests"]
    assert req["DeviceIDs"] == ["GPU-1111", "GPU-2222"]
    assert req["Capabilities"] == [["gpu"]]
    assert kw["image"] == "img:1" and kw["command"] == ["oltunes", "worker", "batch"] and kw["detach"] is True
    assert kw["volumes"][str((tmp_path / "out").resolve())]["mode"] == "rw"
    assert kw["volumes"]["/models"]["mode"] == "ro"
    assert kw["labels"]["oltunes.pool"] == "a100-east"
    argv = worker_argv(s, threads=4, command=["oltunes", "worker"])
    assert argv[:3] == ["oltunes", "worker", "batch"] and argv[argv.index("--device") + 1] == "cuda"


def test_docker_request_for_a_cpu_pool_has_no_gpu_and_pins_cores(tmp_path):
    pool = Pool(name="cpu", accelerator=CATALOG["cpu"], count=1, cpu_set=(0, 1))
    kw = docker_adaptor.run_kwargs(spec(pool, mode="serve", tmp=tmp_path), ["x"], port=8123)
    assert kw["device_requests"] == [] and kw["cpuset_cpus"] == "0,1"
    assert kw["ports"] == {"8123/tcp": ("127.0.0.1", 8123)}


def test_docker_launcher_refuses_clearly_without_an_engine(tmp_path):
    try:
        docker_adaptor.engine(timeout_s=2).close()
        pytest.skip("a Docker engine is reachable here; the refusal path cannot be observed")
    except MissingDependency:
        pass
    with pytest.raises(MissingDependency, match="no Docker engine is reachable.*launcher='local'"):
        Launcher.make("docker").start(spec(GPU_POOL, tmp=tmp_path))


def test_worker_command_line_carries_the_decision(tmp_path):
    pool = Pool(name="cpu", accelerator=CATALOG["cpu"], count=1, cpu_set=(0,))
    argv = worker_argv(spec(pool, tmp=tmp_path), threads=1)
    assert argv[argv.index("oltunes.worker") + 1] == "batch" and "--device" not in argv  # CPU pool: worker's default
    assert argv[argv.index("--batch-size") + 1] == "16" and argv[argv.index("--concurrency") + 1] == "2"
    assert argv[argv.index("--threads") + 1] == "1"
    assert argv[argv.index("--report") + 1] == str(tmp_path / "run" / "report.json")
    serve = worker_argv(spec(pool, mode="serve", tmp=tmp_path), threads=1, port=9000)
    assert serve[serve.index("--max-batch") + 1] == "16" and serve[serve.index("--port") + 1] == "9000"


def test_pool_cores_are_restricted_to_usable_cores():
    import os

    allowed = sorted(os.sched_getaffinity(0))
    assert pool_cores(Pool(name="p", accelerator=CATALOG["cpu"], count=1, cpu_set=(allowed[0],))) == (allowed[0],)
    assert pool_cores(Pool(name="p", accelerator=CATALOG["cpu"], count=1)) == tuple(allowed)
    with pytest.raises(ConfigError, match="pool far: cpu_set"):
        pool_cores(Pool(name="far", accelerator=CATALOG["cpu"], count=1, cpu_set=(4096,)))


def test_unknown_launcher_lists_the_known_ones():
    with pytest.raises(ConfigError, match="docker, local, simulated"):
        Launcher.make("kubernetes")


def test_simulated_launcher_tags_every_result_simulated(shared_data, tmp_path):
    from oltunes.sim.perfmodel import load_performance_model

    pm = load_performance_model()
    v = next(v for v in pm.variants() if v.family == "resnet")
    pool = Pool(name="t4-pool", accelerator=CATALOG["t4"], count=1)
    cand = Candidate(pool=pool.name, accelerator="t4", variant=v, batch_size=8)
    s = WorkerSpec(
        mode="batch", job=JobSpec(family="resnet", slo_ms=500, items=400), candidate=cand, pool=pool, run_dir=tmp_path
    )
    launcher = Launcher.make("simulated", model=pm, seed=1)
    r = launcher.wait(launcher.start(s))
    assert r.simulated and r.measurement.simulated and r.measurement.energy_source == "simulated"
    assert r.measurement.items == 400 and r.measurement.latency_p99_ms > 0
    with pytest.raises(ConfigError, match="batch only"):
        launcher.start(s.model_copy(update={"mode": "serve"}))
