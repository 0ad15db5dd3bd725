"""Advisory mode (issue 30, part 5): the baseline runs, the tuner's decision is recorded beside it in MLflow, and
the tuner learns what ran. Fast: the batch flow's own layer (its tuner, its lease, its MLflow logging, its observe)
on a real MLflow SQLite store; slow: the whole batch flow with worker processes."""

from __future__ import annotations

import asyncio

import pytest
from mlflow import MlflowClient

from flows.common import make_tuner, ran_policy
from oltunes.allocator.holder import hold_lease, leases_for
from oltunes.config import get_settings
from oltunes.inventory import CATALOG
from oltunes.launchers.environment import Environment
from oltunes.tracking import Tracker
from oltunes.tracking import conventions as cv
from oltunes.tracking.decisions import TAG_ADVISORY, TAG_CHOSEN, TAG_WOULD_HAVE_CHOSEN
from oltunes.tuner import Tuner
from oltunes.tuner.advisory import ADVISORY_BASELINE, baseline_policy
from oltunes.types import ClusterState, JobSpec, Measurement, Pool
from tests.tuner.variants import make_variants

POOLS = [Pool(name="t4-a", accelerator=CATALOG["t4"], count=2, slots_per_device=2),
         Pool(name="cpu-a", accelerator=CATALOG["cpu"], count=1, slots_per_device=1)]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OLTUNES_HOME", str(tmp_path / "home"))
    for var in ("OLTUNES_TUNER_URL", "OLTUNES_MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()


def measured(job: JobSpec, d) -> Measurement:
    return Measurement(job_id=job.job_id, decision_id=d.decision_id, candidate=d.candidate, items=job.items,
                       wall_s=4.0, latency_p50_ms=7.0, latency_p95_ms=8.0, latency_p99_ms=9.0,
                       throughput_items_per_s=2500.0, energy_j_per_item=0.2, energy_source="estimated")


def test_an_advisory_batch_job_runs_its_baseline_records_the_tuner_and_feeds_it_back(home, tmp_path):
    env, variants = Environment.make("local"), make_variants()
    tuner, _ = make_tuner(env, variants, "oltunes", advisory=True)
    job = JobSpec(job_id="job-adv", family="cnn", slo_ms=500.0, items=10_000)
    cluster = ClusterState(pools=POOLS)
    before = tuner.n_observed
    # what the tuner alone would do, and what the baseline alone runs, on the same cluster
    alone = Tuner(make_variants(), seed=0).decide(job, cluster)
    baseline = baseline_policy(ADVISORY_BASELINE, variants).decide(job, cluster)

    async def leased():
        async with hold_lease(leases_for(tuner, POOLS), job, ttl_s=30, wait_s=5) as lease:
            return lease.decision

    d = asyncio.run(leased())
    assert d.candidate == baseline.candidate and d.source == "policy"  # the baseline ran, not the tuner
    assert d.advice is not None and d.advice.candidate_key == alone.candidate.key != d.candidate.key
    assert d.advice.ran_predicted is not None and d.advice.predicted_saving is not None

    m = measured(job, d)
    tracker = Tracker()
    rid = tracker.log_measurement(m, slo_ms=500.0, policy=ran_policy("oltunes", True), decision=d)
    run = MlflowClient(get_settings().mlflow_uri).get_run(rid)
    tags, metrics = run.data.tags, run.data.metrics
    assert tags[TAG_ADVISORY] == "true" and tags[cv.TAG_POLICY] == ADVISORY_BASELINE
    assert tags[TAG_CHOSEN] == d.candidate.key and tags[TAG_WOULD_HAVE_CHOSEN] == d.advice.candidate_key
    assert metrics["advisory_predicted_saving"] == pytest.approx(d.advice.predicted_saving)
    # predicted vs measured for what ran, side by side
    assert metrics["advisory_ran_predicted_p99_ms"] == pytest.approx(d.advice.ran_predicted.latency_p99_ms)
    assert metrics[cv.LATENCY_P99] == pytest.approx(9.0)
    assert "the tuner would have chosen" in tags["mlflow.note.content"]

    # the tuner learns what ran, and keeps it
    assert tuner.observe(m) and tuner.save()
    assert tuner.n_observed == before + 1
    assert Tuner.load(get_settings().tuner_state_path).has_seen(m.measurement_id)


def test_advisory_refuses_the_tuner_as_its_own_baseline():
    from oltunes.errors import ConfigError

    with pytest.raises(ConfigError, match="baseline policy"):
        baseline_policy("oltunes", make_variants())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_advisory_batch_flow_runs_the_baseline_end_to_end(own_home, dataset, tmp_path):
    from flows.batch_inference import batch_inference

    res = asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(tmp_path / "out"), slo_ms=500.0,
                                      job_id="job-adv-e2e", items_per_worker=1500, advisory=True))
    assert res.decision.source == "policy" and res.decision.advice is not None
    assert res.measurement.candidate == res.decision.candidate and res.observed
    exp = MlflowClient(get_settings().mlflow_uri).get_experiment_by_name("oltunes-batch")
    (run,) = MlflowClient(get_settings().mlflow_uri).search_runs([exp.experiment_id], "tags.job_id = 'job-adv-e2e'")
    assert run.data.tags[TAG_WOULD_HAVE_CHOSEN] == res.decision.advice.candidate_key
    assert run.data.tags[cv.TAG_POLICY] == ADVISORY_BASELINE
    assert Tuner.load(get_settings().tuner_state_path).has_seen(res.measurement.measurement_id)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_advisory_streaming_service_serves_on_the_baseline_and_records_the_tuner(settings_env, shared_data):
    from flows.streaming_inference import streaming_inference

    settings_env()
    out = asyncio.run(streaming_inference(family="resnet", launcher="simulated", slo_ms=100.0, speedup=4.0,
                                          duration_s=30.0, control_interval_s=10.0, service_id="svc-adv",
                                          advisory=True))
    assert out.decisions and all(d.source == "policy" and d.advice is not None for d in out.decisions)
    assert all(m.candidate in {d.candidate for d in out.decisions} for m in out.measurements)
    c = MlflowClient(get_settings().mlflow_uri)
    exp = c.get_experiment_by_name("oltunes-simulation")
    (run,) = c.search_runs([exp.experiment_id], f"tags.`{cv.TAG_SERVICE}` = 'svc-adv'")
    assert run.data.tags[TAG_ADVISORY] == "true" and run.data.tags[cv.TAG_POLICY] == ADVISORY_BASELINE
    assert run.data.tags[TAG_WOULD_HAVE_CHOSEN] == out.decisions[-1].advice.candidate_key
    assert "advisory_would_have_p99_ms" in run.data.metrics
