"""Flows as real, separate processes: two runs on one output directory; a flow SIGKILLed mid-job."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from flows.batch_inference import batch_inference
from flows.common import PREFECT_EPHEMERAL_APP
from oltunes.config import get_settings
from oltunes.errors import ConfigError
from oltunes.launchers.batch_job import DECISION_FILE, job_outputs
from oltunes.locks import lock_dir
from oltunes.tracking import Tracker
from oltunes.tuner import Tuner
from oltunes.zoo import make_dataset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # flow processes and their Prefect server

FLOW = r"""
import asyncio, json, sys
from flows.batch_inference import batch_inference
res = asyncio.run(batch_inference(**json.loads(sys.argv[1])))
print("OUTCOME " + json.dumps({"run_id": res.run_id, "measured": res.measurement is not None, "observed": res.observed}), flush=True)
"""


def flow_process(params: dict, log: Path, **env: str) -> subprocess.Popen:
    full_env = {**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", **env}
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-c", FLOW, json.dumps(params)], stdout=f, stderr=subprocess.STDOUT, env=full_env)


def rows(out: Path) -> list[int]:
    return [i for p in job_outputs(out) for i in pq.read_table(p, columns=["id"]).column("id").to_pylist()]


def runs_of(job_id: str):
    from mlflow import MlflowClient

    c = MlflowClient(get_settings().mlflow_uri)
    exp = c.get_experiment_by_name("oltunes-batch")
    return [] if exp is None else c.search_runs([exp.experiment_id], f"tags.job_id = '{job_id}'")


def n_observed() -> int:
    path = get_settings().tuner_state_path
    return Tuner.load(path).n_observed if path.exists() else 0


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead; its new parent has not reaped it yet
    except psutil.NoSuchProcess:
        return True


def test_two_flows_on_one_output_run_the_job_once(settings_env, tmp_path):
    from prefect.settings import PREFECT_API_URL

    settings_env()
    Tracker().history()  # the MLflow store exists before the two processes start (its first-use race is not ours)
    data = make_dataset("cnn", 6_000, tmp_path / "in.parquet", seed=4)
    out = tmp_path / "shared-out"
    before = n_observed()
    params = {"family": "cnn", "dataset": str(data), "output": str(out), "slo_ms": 1000.0, "job_id": "job-twice",
              "items_per_worker": 3_000, "shard_size": 100, "output_wait_s": 400.0}  # fmt: skip
    api = {"PREFECT_API_URL": PREFECT_API_URL.value()}  # both use the test's API (no server start-up each)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [flow_process(params, log, **api) for log in logs]
    for p in procs:
        p.wait(timeout=500)
    texts = [log.read_text() for log in logs]
    assert [p.returncode for p in procs] == [0, 0], texts
    outcomes = [json.loads(t.split("OUTCOME ", 1)[1].splitlines()[0]) for t in texts]
    # one run measured the job; the other waited for the lock and found every shard complete
    assert sorted(o["measured"] for o in outcomes) == [False, True]
    assert sorted(o["observed"] for o in outcomes) == [False, True]
    ids = rows(out)
    assert len(ids) == len(set(ids)) == 6_000 and sorted(ids) == list(range(6_000))
    assert len(runs_of("job-twice")) == 1
    assert n_observed() == before + 1
    for worker_log in out.glob("worker-*/_run/worker.log"):
        assert "Traceback" not in worker_log.read_text()


def test_a_held_output_fails_fast_naming_the_directory_and_holder(settings_env, dataset, tmp_path):
    settings_env()
    out = tmp_path / "busy"
    lock = lock_dir(out)  # another run holds it (this process: flock conflicts between open files too)
    try:
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match=rf"'output'.*{out}.*in use by another run \(pid {os.getpid()}\)"):
            asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(out), slo_ms=500.0, job_id="job-busy"))
        assert time.monotonic() - t0 < 60
        with pytest.raises(ConfigError, match="after waiting 1 s"):
            asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(out), slo_ms=500.0, output_wait_s=1.0))
    finally:
        lock.release()
    assert not (out / DECISION_FILE).exists() and not list(out.glob("worker-*"))
    res = asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(out), slo_ms=500.0, job_id="job-busy"))
    assert res.measurement is not None and len(rows(out)) == 1_500  # released: the job runs


def test_a_sigkilled_flow_leaves_no_worker_and_no_prefect_server(flows_home, tmp_path):
    data = make_dataset("cnn", 20_000, tmp_path / "big.parquet", seed=5)
    out = tmp_path / "o"
    params = {"family": "cnn", "dataset": str(data), "output": str(out), "slo_ms": 1000.0, "shard_size": 100}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    log = tmp_path / "flow.log"
    with open(log, "w") as f:  # its own ephemeral Prefect API, as a user's `python my_flow.py` gets
        proc = subprocess.Popen([sys.executable, "-c", FLOW, json.dumps(params)], stdout=f, stderr=subprocess.STDOUT,
                                env={**env, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"})  # fmt: skip
    worker = server = None
    try:
        pidfile, first = out / "worker-00000" / "_run" / "worker.pid", out / "worker-00000" / "part-00000.parquet"
        deadline = time.monotonic() + 300
        while not (pidfile.exists() and first.exists()):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no worker shard in time:\n{log.read_text()}"
            time.sleep(0.05)
        worker = int(pidfile.read_text())
        servers = [c.pid for c in psutil.Process(proc.pid).children() if PREFECT_EPHEMERAL_APP in " ".join(c.cmdline())]
        assert len(servers) == 1, "the flow process did not start its own Prefect API"
        server = servers[0]
        assert not gone(worker) and not gone(server)
        os.kill(proc.pid, signal.SIGKILL)  # mid-job
        proc.wait(10)
        deadline = time.monotonic() + 30
        while not (gone(worker) and gone(server)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(worker), f"worker {worker} outlived its SIGKILLed flow"
        assert gone(server), f"Prefect's ephemeral server {server} outlived its SIGKILLed flow"
    finally:
        for pid in (worker, server):
            if pid and not gone(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
