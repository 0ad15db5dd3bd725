"""Docker seams (the exact container request, GPUs by UUID, refusals; the real engine is in test_docker_engine.py) and the simulated launcher."""

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


def test_gpu_container_gets_its_gpus_by_uuid_and_the_worker_args_after_the_entrypoint(tmp_path):
    s = spec(GPU_POOL, tmp=tmp_path)
    args = worker_argv(s, threads=4, command=[])
    kw = docker_adaptor.container_config(s, args, image="img:1", cores=4, memory_mb=2048, user="1000:1000")
    (req,) = kw["device_requests"]
    assert req["DeviceIDs"] == ["GPU-1111", "GPU-2222"] and req["Capabilities"] == [["gpu"]] and req["Count"] == 0
    assert kw["environment"]["CUDA_VISIBLE_DEVICES"] == "GPU-1111,GPU-2222"
    # The image's ENTRYPOINT is `oltunes worker`: the command is the subcommand and its options, nothing before.
    assert kw["command"][0] == "batch" and "oltunes" not in kw["command"]
    assert kw["command"][kw["command"].index("--device") + 1] == "cuda"
    assert kw["network_mode"] == "none" and kw["healthcheck"] == {"test": ["NONE"]}  # a batch worker needs no net
    assert kw["nano_cpus"] == 4_000_000_000 and kw["mem_limit"] == "2048m" and kw["user"] == "1000:1000"
    assert kw["read_only"] and kw["cap_drop"] == ["ALL"] and kw["init"]
    assert kw["volumes"][str((tmp_path / "out").resolve())]["mode"] == "rw"
    assert kw["volumes"][str((tmp_path / "in").resolve())]["mode"] == "ro"
    assert kw["volumes"]["/models"]["mode"] == "ro"
    assert kw["labels"]["oltunes.pool"] == "a100-east" and kw["labels"]["oltunes.job_id"] == s.job.job_id
    assert kw["labels"]["oltunes.owner"] == docker_adaptor.OWNER


def test_paths_through_a_symbolic_link_are_found_inside_the_container(tmp_path):
    (tmp_path / "real" / "models").mkdir(parents=True)
    (tmp_path / "home").symlink_to(tmp_path / "real")  # e.g. a zoo or a home linked from another disk
    linked = tmp_path / "home" / "models"
    s = spec(GPU_POOL, tmp=tmp_path, candidate=spec(GPU_POOL).candidate.model_copy(
        update={"variant": VARIANT.model_copy(update={"path": str(linked / "cnn-s-fp32.onnx")})}))
    args = worker_argv(s, threads=1, command=[])
    volumes = docker_adaptor.mounts(s)
    mount = volumes[str((tmp_path / "real" / "models").resolve())]  # the source: the real directory
    # the target: where the worker's --model argument points, so the file is there inside
    assert mount == {"bind": str(linked), "mode": "ro"} and args[args.index("--model") + 1].startswith(mount["bind"] + "/")


def test_cpu_serve_container_shares_the_host_network_and_pins_cores(tmp_path):
    pool = Pool(name="cpu", accelerator=CATALOG["cpu"], count=1, cpu_set=(0, 1))
    s = spec(pool, mode="serve", tmp=tmp_path, input_path=None, output_dir=None)
    kw = docker_adaptor.container_config(s, ["serve"], image="i", cores=2, memory_mb=512, port=8123, user="0:0")
    assert kw["device_requests"] == [] and kw["cpuset_cpus"] == "0,1" and "CUDA_VISIBLE_DEVICES" not in kw["environment"]
    assert kw["network_mode"] == "host" and "ports" not in kw and "healthcheck" not in kw  # the image's check
    assert kw["environment"]["OLTUNES_WORKER_PORT"] == "8123"


def test_a_gpu_pool_without_uuids_is_refused_not_run_on_cpu(tmp_path):
    pool = Pool(name="t4-pool", accelerator=CATALOG["t4"], count=1)
    with pytest.raises(ConfigError, match="t4-pool: a t4 pool needs device_ids"):
        docker_adaptor.container_config(spec(pool, tmp=tmp_path), ["batch"], image="i", cores=1, memory_mb=64, user="0:0")


def test_the_gpu_inventory_template_names_every_device_and_engine(repo_root):
    from oltunes.inventory import load_inventory

    pools = load_inventory(repo_root / "infra" / "inventory.gpu.yaml")
    assert pools and all(len(p.device_ids) == p.count and p.engine for p in pools)
    assert all(d.startswith("GPU-") for p in pools for d in p.device_ids)


def test_the_docker_socket_is_never_mounted(tmp_path):
    sock_dir = tmp_path / "engine"
    s = spec(GPU_POOL, tmp=tmp_path, output_dir=sock_dir)
    with pytest.raises(ConfigError, match="would expose the Docker socket"):
        docker_adaptor.mounts(s, endpoint=f"unix://{sock_dir}/docker.sock")
    assert str(sock_dir.resolve()) in docker_adaptor.mounts(s, endpoint=f"unix://{tmp_path}/elsewhere.sock")


def test_remote_engines_name_their_host():
    assert docker_adaptor.engine_host("ssh://ops@gpu-7.example") == "gpu-7.example"
    assert docker_adaptor.engine_host("tcp://10.0.0.5:2376") == "10.0.0.5"
    assert docker_adaptor.engine_host("unix:///run/docker.sock") is None and docker_adaptor.is_local("unix:///x")


def test_each_pool_may_name_its_engine_and_a_bad_one_is_refused_by_field():
    from oltunes.inventory import pools_from_data

    (p,) = pools_from_data({"pools": [{"name": "g", "accelerator": "l4", "count": 1, "engine": "ssh://gpu-1"}]})
    assert p.engine == "ssh://gpu-1" and docker_adaptor.endpoint_of(p, "unix:///d.sock") == "ssh://gpu-1"
    with pytest.raises(ConfigError, match="engine"):
        pools_from_data({"pools": [{"name": "g", "accelerator": "l4", "count": 1, "engine": "http://x y"}]})


def test_docker_launcher_refuses_clearly_when_the_pools_engine_is_down(tmp_path):
    pool = GPU_POOL.model_copy(update={"engine": f"unix://{tmp_path}/no-engine.sock"})
    with pytest.raises(MissingDependency, match="no Docker engine is reachable at unix://.*no-engine.sock.*launcher='local'"):
        Launcher.make("docker").start(spec(pool, tmp=tmp_path))


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
