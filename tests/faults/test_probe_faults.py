"""Issue 30's probe-shard target end to end: a batch job's output holds exactly the input's rows, once, after a
SIGKILL during a probe shard: of its worker (by PID; the flow's retry resumes it) and of the flow itself (a re-run
resumes the interrupted probe on its own candidate and never runs a finished one again).

Real parts throughout: worker processes running ONNX Runtime (local launcher), the in-process tuner and lease book,
MLflow SQLite, Prefect (the test harness; the killed flow its own ephemeral API, as a user's ``python flow.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from oltunes.config import get_settings
from oltunes.launchers.batch_job import job_outputs
from oltunes.launchers.probe_shards import recorded_probes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PARAMS = dict(family="cnn", slo_ms=1000.0, accuracy_floor=0.5, probes=2, probe_share=0.1, probe_min_items=1_000,
              items_per_worker=10_000, shard_size=25)  # fmt: skip
KILLED_PROBE = 1  # the first trial's probe shard (probe 0 is the decision's own choice)

FLOW = r"""
import asyncio, json, sys
from flows.batch_inference import batch_inference
asyncio.run(batch_inference(**json.loads(sys.argv[1])))
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory, built_zoo):
    home = tmp_path_factory.mktemp("probe-faults-home")
    (home / "zoo").symlink_to(built_zoo)
    mp = pytest.MonkeyPatch()
    mp.setenv("OLTUNES_HOME", str(home))
    for var in ("OLTUNES_TUNER_URL", "OLTUNES_MLFLOW_TRACKING_URI"):
        mp.delenv(var, raising=False)
    get_settings.cache_clear()
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield home
    mp.undo()
    get_settings.cache_clear()


def rows(out: Path) -> list[int]:
    return [i for p in job_outputs(out) for i in pq.read_table(p, columns=["id"]).column("id").to_pylist()]


def input_ids(data: Path) -> list[int]:
    return pq.read_table(data, columns=["id"]).column("id").to_pylist()


def wait_for_probe_shard(out: Path, probe: int, alive=lambda: True, timeout_s: float = 300) -> int:
    """The PID of probe `probe`'s worker once it has written its first shard (mid-probe)."""
    wdir = out / f"worker-{probe:05d}"
    pidfile, first = wdir / "_run" / "worker.pid", wdir / "part-00000.parquet"
    deadline = time.monotonic() + timeout_s
    while not (pidfile.exists() and first.exists()):
        assert alive(), "the flow ended before the probe shard started"
        assert time.monotonic() < deadline, "no probe shard in time"
        time.sleep(0.005)
    return int(pidfile.read_text())


def probe_done(out: Path, probe: int) -> int:
    """Shards the probe's worker skipped on its last start (already complete from an earlier one)."""
    return json.loads((out / f"worker-{probe:05d}" / "_run" / "report.json").read_text())["shards_skipped"]


def starts(out: Path, part: int) -> int:
    return (out / f"worker-{part:05d}" / "_run" / "worker.log").read_text().count("--- ")


def test_a_worker_sigkilled_during_a_probe_is_resumed_and_every_row_is_written_once(home, tmp_path):
    from flows.batch_inference import batch_inference
    from oltunes.zoo import make_dataset

    data = make_dataset("cnn", 20_000, tmp_path / "in.parquet", seed=11)
    out = tmp_path / "out"
    killed: list[int] = []

    def killer() -> None:
        pid = wait_for_probe_shard(out, KILLED_PROBE)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    res = asyncio.run(batch_inference(dataset=str(data), output=str(out), job_id="job-probe-worker-kill", **PARAMS))
    th.join(timeout=5)
    assert killed, "the probe's worker was never killed"
    ids = rows(out)
    assert len(ids) == len(set(ids)) == 20_000 and sorted(ids) == sorted(input_ids(data))
    record = recorded_probes(out)
    assert starts(out, KILLED_PROBE) == 2 and probe_done(out, KILLED_PROBE) >= 1  # the retry resumed it
    killed_probe = res.probes[KILLED_PROBE]
    assert killed_probe.purpose == "probe" and killed_probe.items < record.items[KILLED_PROBE]  # measured what it ran


def test_a_flow_sigkilled_during_a_probe_resumes_it_on_a_rerun_and_writes_every_row_once(home, tmp_path):
    from flows.batch_inference import batch_inference
    from oltunes.zoo import make_dataset

    data = make_dataset("cnn", 20_000, tmp_path / "in.parquet", seed=12)
    out = tmp_path / "out"
    params = {**PARAMS, "dataset": str(data), "output": str(out), "job_id": "job-probe-flow-kill"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}  # its own ephemeral Prefect API
    log = tmp_path / "flow.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", FLOW, json.dumps(params)], stdout=f, stderr=subprocess.STDOUT,
                                env={**env, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"})  # fmt: skip
    try:
        worker = wait_for_probe_shard(out, KILLED_PROBE, alive=lambda: proc.poll() is None)
        os.kill(proc.pid, signal.SIGKILL)  # the flow, mid-probe (its worker dies with it)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    record = recorded_probes(out)
    before = set(rows(out))
    assert record is not None and 0 < len(before) < 20_000

    res = asyncio.run(batch_inference(**params))  # the re-run
    ids = rows(out)
    assert len(ids) == len(set(ids)) == 20_000 and sorted(ids) == sorted(input_ids(data))
    assert recorded_probes(out) == record  # the same probe shards, on the same candidates
    assert starts(out, 0) == 1  # the finished probe was not run again
    assert starts(out, KILLED_PROBE) == 2 and probe_done(out, KILLED_PROBE) >= 1  # the interrupted one resumed
    assert [m.candidate for m in res.probes] == [s.decision.candidate for s in record.probes[KILLED_PROBE:]]
