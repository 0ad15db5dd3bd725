"""The deployments as Prefect runs them: a real `prefect server start` and process worker after `infra/deploy.sh`.

- The shipped cron schedule of ``batch-hourly`` produces scheduled runs; a schedule due in a few seconds produces a
  run that the worker takes to Completed.
- The long-running ``streaming-service`` deployment, cancelled while it serves, ends Cancelled with its gateway
  closed and no serving worker left behind.
"""

from __future__ import annotations

import datetime as dt
import signal
from pathlib import Path

import httpx
import psutil
import pytest

from oltunes.netaddr import free_port
from oltunes.launchers.traffic import BUNDLED_TRACE
from tests.deploy.conftest import FINAL, stop, wait_for

pytestmark = pytest.mark.slow


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
def test_scheduled_batch_runs_and_streaming_cancels_cleanly(deployed):
    home, api, logs = deployed.home, deployed.api, deployed.logs
    worker = None
    try:

        # The shipped schedule: hourly at minute 0, so the server has scheduled runs at the top of coming hours.
        batch = api.deployment("batch-inference", "batch-hourly")
        assert [s["schedule"].get("cron") for s in batch["schedules"]] == ["0 * * * *"]
        cron_runs = wait_for("scheduled runs from the cron schedule", lambda: [
            x for x in api.runs(batch["id"]) if x["auto_scheduled"] and x["state_type"] == "SCHEDULED"], 180)
        starts = [dt.datetime.fromisoformat(x["expected_start_time"]) for x in cron_runs]
        assert all(s.minute == 0 and s.second == 0 for s in starts) and starts == sorted(starts)

        # A schedule due in a few seconds (one run an hour, the first now): the worker runs it to Completed.
        anchor = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=20)).isoformat()
        deployed.cli("prefect", "deployment", "schedule", "create", "batch-inference/batch-hourly",
                     "--interval", "3600", "--anchor-date", anchor, "--replace", "-y")
        worker = deployed.start("worker-local", "prefect", "worker", "start", "--pool", "oltunes-local")
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
        deployed.cli("prefect", "deployment", "run", "streaming-inference/streaming-service",
                     "--param", "duration_s=1200", "--param", f"gateway_port={gw}",
                     "--param", "control_interval_s=5", "--param", f"trace={BUNDLED_TRACE}")
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
        deployed.cli("prefect", "flow-run", "cancel", run["id"])
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
        stop(worker, signal.SIGINT)  # a Prefect worker stops on SIGINT, before the server (the fixture's)
