"""The local launcher with the real worker CLI: pinning, exit status, CPU time, telemetry, timeouts, serve mode."""

from __future__ import annotations

import os
import shutil

import httpx
import pyarrow.parquet as pq
import pytest

from oltunes.errors import InputRejected, WorkerError
from oltunes.inventory import CATALOG
from oltunes.launchers import Launcher, WorkerSpec
from oltunes.types import Candidate, JobSpec, Pool, Variant

pytestmark = pytest.mark.slow  # real `oltunes worker` processes, batch and serve

CORE = sorted(os.sched_getaffinity(0))[-1]
POOL = Pool(name="one-core", accelerator=CATALOG["cpu"], count=1, cpu_set=(CORE,))


def spec(variant: Variant, data, tmp_path, mode="batch", **kw) -> WorkerSpec:
    cand = Candidate(pool=POOL.name, accelerator="cpu", variant=variant, batch_size=8, concurrency=1)
    base = dict(mode=mode, job=JobSpec(family="cnn", slo_ms=100), candidate=cand, pool=POOL, run_dir=tmp_path / "run",
                input_path=data, output_dir=tmp_path / "out", shard_size=200)  # fmt: skip
    return WorkerSpec(**{**base, **kw})


def test_batch_worker_is_pinned_and_reports_real_cpu_time(small_zoo, tmp_path):
    variant, data = small_zoo
    launcher = Launcher.make("local", watts_per_core=10.0)
    h = launcher.start(spec(variant, data, tmp_path))
    r = launcher.wait(h, timeout_s=120)
    assert r.returncode == 0 and r.report["items"] == 600 and r.report["threads"] == 1
    if shutil.which("taskset"):
        assert f"taskset -c {CORE} " in launcher.logs(h)
    tel = r.telemetry
    assert tel.energy_source == "estimated" and tel.cpu_time_s > 0
    assert tel.energy_j == pytest.approx(tel.cpu_time_s * 10.0)
    assert tel.cpu_time_s >= r.report["cpu_time_s"] * 0.9  # rusage covers the whole process (start-up too)
    assert sum(pq.read_metadata(p).num_rows for p in (tmp_path / "out").glob("part-*.parquet")) == 600


def test_pinning_is_real(small_zoo, tmp_path):
    variant, _ = small_zoo
    launcher = Launcher.make("local")
    h = launcher.start(spec(variant, None, tmp_path, mode="serve", input_path=None, output_dir=None))
    try:
        launcher.ready(h, timeout_s=60)
        assert os.sched_getaffinity(h.pid) == {CORE}
        r = httpx.post(f"{h.url}/infer", json={"inputs": [[0.0] * 64]}, timeout=10)
        assert r.status_code == 200 and len(r.json()["predictions"]) == 1
        assert launcher.alive(h)
    finally:
        rc = launcher.stop(h, grace_s=10)
    assert rc == 0  # SIGTERM is a graceful stop for the server
    assert not launcher.alive(h)


def test_a_failing_worker_raises_with_its_log(small_zoo, tmp_path):
    variant, data = small_zoo
    broken = variant.model_copy(update={"path": str(tmp_path / "missing.onnx")})
    launcher = Launcher.make("local")
    h = launcher.start(spec(broken, data, tmp_path))
    with pytest.raises(InputRejected, match="rejected its input: model file .*missing.onnx does not exist"):
        launcher.wait(h, timeout_s=120)


def test_a_hung_worker_is_stopped_at_its_deadline(small_zoo, tmp_path):
    variant, data = small_zoo
    launcher = Launcher.make("local")
    h = launcher.start(spec(variant, data, tmp_path))
    with pytest.raises(WorkerError, match="timeout"):
        launcher.wait(h, timeout_s=0.2)
    assert not launcher.alive(h)
