"""What the lease tests share: a two-pool cluster, its jobs, and a tuning service allocating it over real HTTP."""

from __future__ import annotations

import pytest

from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.service.app import create_app, serve_in_thread
from oltunes.types import JobSpec, Pool
from tests.tuner.serve_process import TOKEN
from tests.tuner.variants import make_variants

POOLS = [Pool(name="t4-a", accelerator=CATALOG["t4"], count=2, slots_per_device=2),
         Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)]


def job(i: int | str, slo_ms: float = 5_000.0) -> JobSpec:
    return JobSpec(job_id=f"job-{i}", family="cnn", slo_ms=slo_ms, items=10_000)


@pytest.fixture
def service(tmp_path):
    """(url, book) of a tuning service on loopback allocating `POOLS` (its book durable under tmp_path)."""
    tuner = Tuner(make_variants(), seed=0)
    app = create_app(tuner, token=TOKEN, state_path=tmp_path / "state.json", pools=POOLS, persist_every_s=0)
    with serve_in_thread(app) as url:
        yield url, app.state.service.leases
