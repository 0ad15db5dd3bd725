"""The deployments as Prefect runs them: a real `prefect server start` and process worker after `infra/deploy.sh`.

- The shipped cron schedule of ``batch-hourly`` produces scheduled runs; a schedule due in a few seconds produces a
  run that the worker takes to Completed.
- The long-running ``streaming-service`` deployment, cancelled while it serves, ends Cancelled with its gateway
  closed and no serving worker left behind.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from oltunes.launchers.base import free_port
from oltunes.launchers.traffic import BUNDLED_TRACE

pytestmark = pytest.mark.slow

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


class Api:
    """The few REST calls the test needs (Prefect's documented API, no client state)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)

    def deployment(self, flow: str, name: str) -> dict:
        return self.http.get(f"/deployments/name/{flow}/{name}").raise_for_status().json()

    def runs(self, deployment_id: str) -> list[dict]:
        body = {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"}
        return self.http.post("/flow_runs/filter", json=body).raise_for_status().json()

    def run(self, run_id: str) -> dict:
        return self.http.get(f"/flow_runs/{run_id}").raise_for_status().json()


def wait_for(what: str, check, timeout_s: float, every_s: float = 2.0, diagnose=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g}s{diagnose()}")
        time.sleep(every_s)


def serving_workers(home: Path) -> list[psutil.Process]:
    """Serving worker processes of this test's OLTUNES_HOME."""
    found = []
    for p in psutil.process_iter():
        try:
            cmd = " ".join(p.cmdline())
            if "serve" in cmd and "worker" in cmd and p.environ().get("OLTUNES_HOME") == str(home):
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.mark.timeout(1800)
def test_scheduled_batch_runs_and_streaming_cancels_cleanly(repo_root, built_zoo, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(built_zoo, home / "zoo")
    (home / "logs").mkdir(parents=True)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ, "OLTUNES_HOME": str(home), "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": api_url,
        "OLTUNES_PREFECT_PORT": str(port), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5",  # the scheduler looks every 5 s (default 60)
        "MLFLOW_DISABLE_TELEMETRY": "true", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
    }  # fmt: skip

    def start(name: str, *cmd: str) -> subprocess.Popen:
        out = open(home / "logs" / f"{name}.log", "w")
        return subprocess.Popen(cmd, cwd=repo_root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def logs() -> str:
        return "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((home / "logs").glob("*.log")))

    server = start("prefect-server", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port))
    worker = None
    try:
        r = subprocess.run(["bash", "infra/deploy.sh"], cwd=repo_root, env=env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + logs()
        api = Api(api_url)

        # The shipped schedule: hourly at minute 0, so the server has scheduled runs at the top of coming hours.
        batch = api.deployment("batch-inference", "batch-hourly")
        assert [s["schedule"].get("cron") for s in batch["schedules"]] == ["0 * * * *"]
        cron_runs = wait_for("scheduled runs from the cron schedule", lambda: [
            x for x in api.runs(batch["id"]) if x["auto_scheduled"] and x["state_type"] == "SCHEDULED"], 180)
        starts = [dt.datetime.fromisoformat(x["expected_start_time"]) for x in cron_runs]
        assert all(s.minute == 0 and s.second == 0 for s in starts) and starts == sorted(starts)

        # A schedule due in a few seconds (one run an hour, the first now): the worker runs it to Completed.
        anchor = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=20)).isoformat()
        r = subprocess.run(["prefect", "deployment", "schedule", "create", "batch-inference/batch-hourly",
                            "--interval", "3600", "--anchor-date", anchor, "--replace", "-y"],
                           cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        worker = start("worker-local", "prefect", "worker", "start", "--pool", "oltunes-local")
        due = dt.datetime.fromisoformat(anchor)

        def scheduled_done() -> dict | None:
            for x in api.runs(batch["id"]):
                if x["auto_scheduled"] and dt.datetime.fromisoformat(x["expected_start_time"]) == due:
                    assert x["state_type"] not in FINAL - {"COMPLETED"}, (x["state_type"], logs())
                    return x if x["state_type"] == "COMPLETED" else None
            return None

        done = wait_for("the scheduled batch run Completed", scheduled_done, 900, every_s=5, diagnose=logs)
        assert done["name"].startswith("batch-cnn-")  # named after its job
        assert list((home / "outputs").glob("*/worker-*/part-*.parquet"))

        # The long-running streaming service: started, serving on its gateway, then cancelled.
        gw = free_port()
        r = subprocess.run(["prefect", "deployment", "run", "streaming-inference/streaming-service",
                            "--param", "duration_s=1200", "--param", f"gateway_port={gw}",
                            "--param", "control_interval_s=5", "--param", f"trace={BUNDLED_TRACE}"],
                           cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        stream = api.deployment("streaming-inference", "streaming-service")
        (run,) = [x for x in api.runs(stream["id"])]

        def ready() -> bool:
            assert api.run(run["id"])["state_type"] not in FINAL, logs()
            try:
                return httpx.get(f"http://127.0.0.1:{gw}/v2/health/ready", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for("the streaming service serving on its gateway", ready, 600, diagnose=logs)
        assert serving_workers(home)
        r = subprocess.run(["prefect", "flow-run", "cancel", run["id"]], cwd=repo_root, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for("the streaming run Cancelled", lambda: api.run(run["id"])["state_type"] == "CANCELLED", 300,
                 diagnose=logs)

        def gateway_closed() -> bool:
            try:
                httpx.get(f"http://127.0.0.1:{gw}/v2/health/live", timeout=2)
                return False
            except httpx.TransportError:
                return True

        wait_for("the gateway closed", gateway_closed, 60)
        wait_for("no serving worker left", lambda: not serving_workers(home), 60,
                 diagnose=lambda: str([" ".join(p.cmdline()) for p in serving_workers(home)]))
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGINT)  # a Prefect worker stops on SIGINT, before the server
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
