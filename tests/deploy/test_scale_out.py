"""Scale-out on one machine (issue 11 item 6), on the session's deployed Prefect server: two process workers
polling one pool take two batch flow runs at once; both runs decide and lease through one `oltunes tuner serve`
allocating a one-slot device, and log to `mlflow server` on a SQLite database."""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time

import httpx
import pytest
import yaml
from mlflow import MlflowClient

from oltunes.netaddr import free_port
from oltunes.tracking import conventions as cv
from tests.deploy.conftest import FINAL, stop, wait_for

pytestmark = pytest.mark.slow

QUEUE = "scale-out"  # its own queue of the pool: no scheduled run of another test is taken by these workers


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.timeout(900)
def test_two_workers_run_two_flow_runs_at_once_against_one_tuning_service_and_mlflow_server(deployed, tmp_path):
    api, logs = deployed.api, deployed.logs
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"pools": [
        {"name": "cpu-one", "accelerator": "cpu", "count": 1, "slots_per_device": 1, "cpu_set": [0]}]}))
    tuner_url, mlflow_url = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    procs: dict[str, object] = {}
    leases_seen: list[list[str]] = []
    stop_watch = threading.Event()

    def watch_leases() -> None:
        with httpx.Client(base_url=tuner_url, timeout=10) as http:
            while not stop_watch.is_set():
                try:
                    leases_seen.append([l["job"]["job_id"] for l in http.get("/v1/leases").json()["leases"]])
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.2)

    watcher = threading.Thread(target=watch_leases)
    try:
        procs["mlflow"] = deployed.start(
            "mlflow-server", "mlflow", "server", "--host", "127.0.0.1", "--port", mlflow_url.rsplit(":", 1)[1],
            "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--artifacts-destination", str(tmp_path / "mlflow-artifacts"))
        procs["tuner"] = deployed.start(
            "tuner-serve", "oltunes", "tuner", "serve", "--port", tuner_url.rsplit(":", 1)[1], "--inventory",
            str(inventory), "--state", str(tmp_path / "tuner" / "state.json"), "--persist-every", "0")
        wait_for("mlflow server", lambda: healthy(f"{mlflow_url}/health"), 180, diagnose=logs)
        wait_for("tuning service", lambda: healthy(f"{tuner_url}/v1/health"), 180, diagnose=logs)
        watcher.start()

        deployed.cli("prefect", "work-queue", "create", QUEUE, "--pool", "oltunes-local")
        batch = api.deployment("batch-inference", "batch-hourly")
        runs = [api.create_run(batch["id"], {"work_queue_name": QUEUE, "parameters": {
            "job_id": f"scale-{k}", "inventory": str(inventory), "items_per_worker": 1_000, "slo_ms": 60_000.0,
            "accuracy_floor": 0.0, "lease_ttl_s": 30.0}}) for k in "ab"]
        # Two workers on the one pool, each running one flow run at a time: the second run must go to the other.
        worker_env = {"OLTUNES_TUNER_URL": tuner_url, "OLTUNES_TUNER_TIMEOUT_S": "30",
                      "OLTUNES_MLFLOW_TRACKING_URI": mlflow_url}
        for name in ("worker-a", "worker-b"):
            procs[name] = deployed.start(name, "prefect", "worker", "start", "--pool", "oltunes-local", "--work-queue",
                                         QUEUE, "--limit", "1", "--name", name, env=worker_env)

        def finished() -> list[dict] | None:
            states = [api.run(r) for r in runs]
            bad = [s for s in states if s["state_type"] in FINAL - {"COMPLETED"}]
            assert not bad, [(s["name"], s["state_type"]) for s in bad] + [logs()]
            return states if all(s["state_type"] == "COMPLETED" for s in states) else None

        done = wait_for("both flow runs Completed", finished, 600, every_s=3, diagnose=logs)
    finally:
        stop_watch.set()
        if watcher.is_alive():
            watcher.join(timeout=30)
        for name in ("worker-a", "worker-b"):  # workers first, with SIGINT; then the services
            stop(procs.get(name), signal.SIGINT)
        stop(procs.get("tuner"), signal.SIGINT)
        stop(procs.get("mlflow"))

    # each worker ran one of the runs (a run's output streams into the log of the worker that ran it; the other
    # worker may have tried to submit it too and been refused), and the runs were under way at the same time
    ran = {w: {s["name"] for s in done if f"Flow run '{s['name']}' - Finished in state Completed"
               in (deployed.home / "logs" / f"{w}.log").read_text()} for w in ("worker-a", "worker-b")}
    assert sorted(map(len, ran.values())) == [1, 1] and ran["worker-a"] != ran["worker-b"], ran
    span = [(dt.datetime.fromisoformat(s["start_time"]), dt.datetime.fromisoformat(s["end_time"])) for s in done]
    assert max(a for a, _ in span) < min(b for _, b in span), span
    # both leased from the one service, which never gave its one slot to two jobs
    assert {"scale-a", "scale-b"} <= {j for seen in leases_seen for j in seen}
    assert max(map(len, leases_seen)) == 1 and leases_seen[-1] == []
    # both runs are in the MLflow server's database, finished
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    finished_runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
                     if r.info.status == "FINISHED"]
    assert {r.data.tags.get(cv.TAG_JOB) for r in finished_runs} >= {"scale-a", "scale-b"}
