"""``oltunes tuner serve --advisory`` (issue 30, part 5): a client runs what the baseline would run, whatever the
tuner thinks; the tuner's choice rides along as ``Decision.advice`` and the service still learns what ran."""

from __future__ import annotations

import asyncio

import pytest

from oltunes.allocator.holder import hold_lease, leases_for
from oltunes.client.tuner_client import TunerClient
from oltunes.service.app import create_app, serve_in_thread
from oltunes.tuner import Tuner
from oltunes.tuner.advisory import ADVISORY_BASELINE, baseline_policy
from oltunes.types import ClusterState, JobSpec, Measurement
from tests.tuner.conftest import POOLS
from tests.tuner.serve_process import TOKEN, ServeProcess
from tests.tuner.variants import make_variants

JOBS = [JobSpec(job_id=f"job-{i}", family=fam, slo_ms=slo, items=10_000, objective=obj)
        for i, (fam, slo, obj) in enumerate([("cnn", 5_000.0, "energy"), ("cnn", 50.0, "completion_time"),
                                              ("cnn", 500.0, "cost")])]


def client(url: str, tmp_path) -> TunerClient:
    return TunerClient(url, token=TOKEN, timeout_s=10.0, outbox_dir=tmp_path / "outbox", retry_after_s=0)


def baseline_candidates(cluster: ClusterState) -> list[str]:
    base = baseline_policy(ADVISORY_BASELINE, make_variants())
    return [base.decide(j, cluster).candidate.key for j in JOBS]


def test_advisory_service_answers_with_the_baseline_and_learns_what_ran(tmp_path):
    tuner = Tuner(make_variants(), seed=0)
    cluster = ClusterState(pools=POOLS)
    own = [Tuner(make_variants(), seed=0).decide(j, cluster).candidate.key for j in JOBS]
    app = create_app(tuner, token=TOKEN, state_path=tmp_path / "state.json", pools=POOLS, persist_every_s=0,
                     advisory=True)
    with serve_in_thread(app) as url:
        c = client(url, tmp_path)
        answers = [c.decide(j, cluster) for j in JOBS]
        # what the client runs is the baseline's, never the tuner's; the tuner's choice is there as advice
        assert [d.candidate.key for d in answers] == baseline_candidates(cluster)
        assert [d.advice.candidate_key for d in answers] == own
        assert any(a != b for a, b in zip(own, baseline_candidates(cluster)))  # the test can tell them apart
        assert all(d.source == "policy" and d.advice.source != "fallback" for d in answers)

        # a lease from the service's allocator places the job where the baseline would, too
        async def leased(job):
            async with hold_lease(leases_for(c, POOLS), job, ttl_s=30, wait_s=5) as lease:
                return lease.decision

        d = asyncio.run(leased(JOBS[0].model_copy(update={"job_id": "job-leased"})))
        assert d.candidate.key == baseline_candidates(cluster)[0] and d.advice is not None

        # what ran is learnt
        m = Measurement(job_id=d.job_id, decision_id=d.decision_id, candidate=d.candidate, items=10_000, wall_s=4.0,
                        latency_p50_ms=7.0, latency_p95_ms=8.0, latency_p99_ms=9.0, throughput_items_per_s=2500.0,
                        energy_j_per_item=0.2, energy_source="estimated")
        assert c.observe(m)
        assert app.state.service.tuner.has_seen(m.measurement_id)


@pytest.mark.slow
def test_the_advisory_flag_of_tuner_serve_keeps_clients_on_the_baseline(tmp_path):
    """A real ``oltunes tuner serve --advisory`` process."""
    cluster = ClusterState(pools=POOLS)
    proc = ServeProcess(tmp_path)
    proc.cmd += ["--advisory"]
    with proc as srv:
        c = client(srv.url, tmp_path)
        answers = [c.decide(j, cluster) for j in JOBS]
    assert [d.candidate.key for d in answers] == baseline_candidates(cluster)
    assert all(d.advice is not None for d in answers)
