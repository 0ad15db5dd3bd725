"""Two batch flow runs at once against one tuning service: the service allocates, so the second job lands beside
the first as a real co-running group, on the device the decision named, and both leases end with their jobs."""

from __future__ import annotations

import asyncio

import pyarrow.parquet as pq
import pytest

from flows.batch_inference import batch_inference
from oltunes.config import get_settings
from oltunes.inventory import load_inventory
from oltunes.launchers.environment import Environment
from oltunes.launchers.batch_job import job_outputs
from oltunes.tuner import Tuner
from oltunes.tuner.service import create_app, serve_in_thread

pytestmark = pytest.mark.timeout(400)


def test_two_flow_runs_share_one_device_as_a_co_running_group(own_home, one_device_inventory, monkeypatch,
                                                             settings_env, dataset, tmp_path):
    inventory = one_device_inventory("cpu-shared", slots=2)
    variants = Environment.make("local").variants(get_settings())
    app = create_app(Tuner(variants, seed=0), state_path=tmp_path / "tuner.json", pools=load_inventory(inventory),
                     persist_every_s=0)
    book = app.state.service.leases
    with serve_in_thread(app) as url:
        monkeypatch.setenv("OLTUNES_TUNER_URL", url)
        # The service runs in this process's threads, beside both flows: under load its first answers can take
        # longer than the client's 2 s default, and a timed-out acquire runs the job on an unshared fallback lease.
        monkeypatch.setenv("OLTUNES_TUNER_TIMEOUT_S", "30")
        settings_env()

        async def both():
            return await asyncio.gather(*(
                batch_inference(family="cnn", dataset=str(dataset), output=str(tmp_path / name), slo_ms=60_000.0,
                                job_id=name, inventory=str(inventory), items_per_worker=500, lease_ttl_s=30)
                for name in ("job-one", "job-two")))  # fmt: skip

        one, two = asyncio.run(both())
        assert book.view().leases == [] and book.view().waiting == []  # both released at the end
    for res, name in ((one, "job-one"), (two, "job-two")):
        assert res.decision.candidate.pool == "cpu-shared" and res.parts == 3
        assert sum(pq.read_metadata(p).num_rows for p in job_outputs(tmp_path / name)) == 1_500
    # Whichever was granted second was decided with the first on its device: a group of both, and the first as
    # its co-runner in the candidate the learner is taught with.
    first, second = sorted((one, two), key=lambda r: r.decision.group is not None)
    assert first.decision.group is None
    assert set(second.decision.group.members) == {"job-one", "job-two"} and second.decision.group.device == 0
    assert [c.job_id for c in second.measurement.candidate.co_runners] == [first.job_id]
