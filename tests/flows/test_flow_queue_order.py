"""Real batch flows waiting on a full pool are released in the queue policy's order.

A real `oltunes tuner serve --queue-policy sjf` process allocates a one-slot pool; a holder takes the slot; three
real batch flow runs of different sizes join the queue longest first; when the holder lets go, the slot goes to
them shortest first (on the service's own run-time estimates: items over the tuner's predicted throughput), one
after another as each finishes -- not in the order they asked.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pyarrow.parquet as pq
import pytest

from flows.batch_inference import batch_inference
from oltunes.config import get_settings
from oltunes.launchers.environment import Environment
from oltunes.launchers.batch_job import job_outputs
from tests.tuner.serve_process import AUTH, TOKEN, ServeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

SIZES = {"q-long": 1_200, "q-short": 150, "q-mid": 450}  # submitted in this order


def test_batch_flows_waiting_on_a_full_pool_get_it_shortest_first(own_home, one_device_inventory, monkeypatch,
                                                                  settings_env, tmp_path):
    from oltunes.zoo import make_dataset

    inventory = one_device_inventory("cpu-one", slots=1)
    datasets = {name: make_dataset("cnn", n, tmp_path / f"{name}.parquet", seed=2) for name, n in SIZES.items()}

    (tmp_path / "service").mkdir()
    srv = ServeProcess(tmp_path / "service")
    (tmp_path / "service" / "variants.json").write_text(json.dumps(
        [v.model_dump(mode="json") for v in Environment.make("local").variants(get_settings())]))
    srv.cmd += ["--inventory", str(inventory), "--queue-policy", "sjf"]
    srv.env["OLTUNES_HOME"] = str(own_home)  # the flows' home: its zoo is the service's model store
    with srv:
        monkeypatch.setenv("OLTUNES_TUNER_URL", srv.url)
        monkeypatch.setenv("OLTUNES_TUNER_TOKEN", TOKEN)
        settings_env()
        http = httpx.Client(base_url=srv.url, headers=AUTH, timeout=30)
        holder = http.post("/v1/leases", json={"job": {"job_id": "holder", "family": "cnn", "slo_ms": 60_000.0},
                                               "ttl_s": 600}).json()
        assert holder["status"] == "granted"

        def book() -> dict:
            return http.get("/v1/leases").json()

        async def scenario():
            granted: dict[str, float] = {}  # job id -> granted_at, as seen in the book

            async def watch() -> None:
                while True:
                    for lease in (await asyncio.to_thread(book))["leases"]:
                        granted.setdefault(lease["job"]["job_id"], lease["granted_at"])
                    await asyncio.sleep(0.1)

            async def queued(n: int) -> dict:
                deadline = time.monotonic() + 180  # a flow's start-up (Prefect's ephemeral API) is slow here
                while len((view := await asyncio.to_thread(book))["waiting"]) < n:
                    assert time.monotonic() < deadline, f"{n} flows never queued: {view}"
                    for run in runs.values():
                        if run.done():
                            run.result()  # a flow that failed before queueing fails the test now
                    await asyncio.sleep(0.2)
                return view

            watcher = asyncio.create_task(watch())
            runs = {}
            for i, (name, n) in enumerate(SIZES.items()):
                runs[name] = asyncio.create_task(batch_inference(
                    family="cnn", dataset=str(datasets[name]), output=str(tmp_path / name), slo_ms=60_000.0,
                    job_id=name, inventory=str(inventory), items_per_worker=500, lease_ttl_s=30))
                view = await queued(i + 1)
            await asyncio.to_thread(http.delete, f"/v1/leases/{holder['lease']['lease_id']}",
                                    headers={"X-Lease-Secret": holder["secret"]})
            outcomes = {name: await run for name, run in runs.items()}
            watcher.cancel()
            return view, granted, outcomes

        view, granted, outcomes = asyncio.run(scenario())
        assert book()["leases"] == [] and book()["waiting"] == []  # every lease ended with its job
        http.close()

    assert view["queue_policy"] == "sjf"
    waiting = [w["job"]["job_id"] for w in view["waiting"]]
    estimates = [w["expected_duration_s"] for w in view["waiting"]]
    # The service estimated every run time and ordered the queue by it: here that is the jobs' sizes, smallest
    # first, which is not the order they asked in.
    assert all(e is not None and e > 0 for e in estimates) and estimates == sorted(estimates)
    assert waiting == sorted(SIZES, key=SIZES.get) and waiting != list(SIZES)
    # The flows got the slot in that order, one at a time.
    assert [j for _, j in sorted((t, j) for j, t in granted.items() if j != "holder")] == waiting
    for name, n in SIZES.items():
        res = outcomes[name]
        assert res.decision.candidate.pool == "cpu-one"
        assert sum(pq.read_metadata(p).num_rows for p in job_outputs(tmp_path / name)) == n
