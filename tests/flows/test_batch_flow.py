"""The batch flow for real: Prefect test harness, MLflow SQLite, worker processes, the in-process tuner."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow import MlflowClient

from flows.batch_inference import batch_inference
from oltunes.config import get_settings
from oltunes.errors import ConfigError, DataError, WorkerError
from oltunes.launchers.environment import Environment
from oltunes.launchers.batch_job import job_outputs
from oltunes.tracking import Tracker
from oltunes.tracking import conventions as cv
from oltunes.tuner import Tuner

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a real Prefect server, MLflow, workers


def rows(output: str | Path) -> list[int]:
    return [i for p in job_outputs(Path(output)) for i in pq.read_table(p, columns=["id"]).column("id").to_pylist()]


def input_ids(dataset: Path) -> list[int]:
    return pq.read_table(dataset, columns=["id"]).column("id").to_pylist()


def mlflow() -> MlflowClient:
    return MlflowClient(get_settings().mlflow_uri)


def runs_of(job_id: str, experiment: str = "oltunes-batch"):
    exp = mlflow().get_experiment_by_name(experiment)
    return [] if exp is None else mlflow().search_runs([exp.experiment_id], f"tags.job_id = '{job_id}'")


def tuner_state() -> Tuner:
    return Tuner.load(get_settings().tuner_state_path)


def artifact_markdown(key: str) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def read():
        async with get_client() as c:
            return await c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))

    found = asyncio.run(read())
    return found[0].data if found else ""


def test_batch_flow_runs_logs_feeds_back_and_resumes(settings_env, dataset, tmp_path):
    settings_env()
    before = tuner_state().n_observed if get_settings().tuner_state_path.exists() else 0
    out = tmp_path / "out"
    res = asyncio.run(
        batch_inference(family="cnn", dataset=str(dataset), output=str(out), slo_ms=500.0, accuracy_floor=0.5,
                        job_id="job-e2e", items_per_worker=600, shard_size=250)
    )  # fmt: skip
    # outputs: three parts, every input row exactly once
    assert res.parts == 3
    assert sorted(rows(out)) == sorted(input_ids(dataset))
    m = res.measurement
    assert m is not None and m.items == 1500 and not m.simulated and m.energy_source == "estimated"
    assert m.candidate == res.decision.candidate and m.decision_id == res.decision.decision_id

    # MLflow: one run by the conventions, rebuilt exactly by history()
    (run,) = runs_of("job-e2e")
    assert run.info.run_id == res.run_id
    assert run.data.params["variant"] == res.decision.variant.name
    assert run.data.params["batch_size"] == str(res.decision.candidate.batch_size)
    assert run.data.params["pool"] == res.decision.pool
    assert run.data.metrics[cv.LATENCY_P99] == pytest.approx(m.latency_p99_ms)
    assert run.data.metrics[cv.SLO_MET] == float(m.latency_p99_ms <= 500.0)
    assert 0.5 < run.data.metrics[cv.ACCURACY] <= 1.0
    assert run.data.tags[cv.TAG_ENERGY_SOURCE] == "estimated" and run.data.tags[cv.TAG_SIMULATED] == "false"
    assert m in Tracker().history()
    # ids are tags, not params; the run spans the job; the input dataset is logged
    assert "decision_id" not in run.data.params and run.data.tags[cv.TAG_DECISION_ID] == res.decision.decision_id
    assert (run.info.end_time - run.info.start_time) / 1000 >= res.job_wall_s
    (ds,) = run.inputs.dataset_inputs
    assert ds.dataset.name == dataset.stem and '"num_rows": 1500' in ds.dataset.profile
    # every variant of the family is a registered model version; the chosen one is `preferred`, with the
    # accuracy measured here
    versions = mlflow().search_model_versions("name = 'oltunes.cnn'")
    assert {v.tags["variant"] for v in versions} == {v.name for v in Environment.make("local").variants(get_settings()) if v.family == "cnn"}
    mv = mlflow().get_model_version_by_alias("oltunes.cnn", "preferred")
    assert mv.tags["variant"] == res.decision.variant.name
    assert float(mv.tags["measured_accuracy"]) == pytest.approx(m.accuracy, abs=1e-5)

    # the learner saw it once
    t = tuner_state()
    assert t.n_observed == before + 1 and t.has_seen(m.measurement_id)
    # the explanation artifact
    md = artifact_markdown("batch-decision-job-e2e")
    assert res.decision.candidate.key in md and "predicted" in md and "measured" in md

    # re-run on the same output: every shard is complete -> nothing re-done, nothing duplicated, no new run
    again = asyncio.run(
        batch_inference(family="cnn", dataset=str(dataset), output=str(out), slo_ms=500.0, accuracy_floor=0.5,
                        job_id="job-e2e", items_per_worker=600, shard_size=250)
    )  # fmt: skip
    assert again.measurement is None and again.run_id is None and not again.observed
    assert sorted(rows(out)) == sorted(input_ids(dataset))
    assert len(runs_of("job-e2e")) == 1
    assert tuner_state().n_observed == before + 1


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"family": "no-such-family"}, "'family'"),
        ({"slo_ms": -5.0}, "'slo_ms'"),
        ({"dataset": "/nonexistent/input.parquet"}, "'dataset'"),
        ({"accuracy_floor": 1.5}, "'accuracy_floor'"),
        ({"job_id": "../" * 3_000}, "'job_id'"),  # a path, 9 kB: refused, never echoed back
    ],
)
def test_invalid_parameters_fail_fast_naming_the_parameter(settings_env, dataset, tmp_path, overrides, names):
    settings_env()
    params = {"family": "cnn", "dataset": str(dataset), "output": str(tmp_path / "o"), "slo_ms": 100.0, **overrides}
    t0 = time.monotonic()
    with pytest.raises((ConfigError, DataError), match=names) as e:
        asyncio.run(batch_inference(**params))
    assert len(str(e.value)) < 1000
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "o").exists()  # failed before any work


def test_tuner_unreachable_falls_back_and_queues_the_observation(settings_env, monkeypatch, dataset, tmp_path, closed_url):
    monkeypatch.setenv("OLTUNES_TUNER_URL", closed_url)
    monkeypatch.setenv("OLTUNES_TUNER_TIMEOUT_S", "0.5")
    settings_env()
    res = asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(tmp_path / "o"), slo_ms=500.0, job_id="job-fallback"))
    assert res.decision.source == "fallback"
    assert res.measurement is not None and sorted(rows(tmp_path / "o")) == sorted(input_ids(dataset))
    outbox = get_settings().buffer_dir / "tuner-outbox"
    # the new observation waits in the client's outbox (next to any history the warm start tried to send)
    queued = [p.read_text() for p in outbox.glob("*.json")]
    assert sum(res.measurement.measurement_id in q for q in queued) == 1
    assert len(runs_of("job-fallback")) == 1  # tracking still worked


def test_mlflow_unreachable_buffers_then_replays_exactly_once(settings_env, monkeypatch, dataset, tmp_path, closed_url):
    monkeypatch.setenv("OLTUNES_MLFLOW_TRACKING_URI", closed_url)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    settings_env()
    res = asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(tmp_path / "o"), slo_ms=500.0, job_id="job-buffered"))
    assert res.run_id is None and res.observed  # buffered, and the learner still got it
    monkeypatch.delenv("OLTUNES_MLFLOW_TRACKING_URI")
    settings_env()
    assert runs_of("job-buffered") == []
    tracker = Tracker()
    assert tracker.pending() == 1
    assert tracker.flush() == 1 and tracker.pending() == 0 and tracker.flush() == 0
    (run,) = runs_of("job-buffered")
    assert run.data.tags[cv.TAG_KEY] == res.measurement.measurement_id
    assert res.measurement in tracker.history()


def test_worker_killed_mid_batch_is_retried_without_lost_or_duplicated_rows(settings_env, tmp_path):
    settings_env()
    from oltunes.zoo import make_dataset

    data = make_dataset("cnn", 12_000, tmp_path / "big.parquet", seed=2)
    out = tmp_path / "o"
    killed: list[int] = []

    def killer() -> None:
        # Kill the first worker as soon as it has written its first shard (a real mid-batch crash).
        deadline = time.monotonic() + 120
        pidfile = out / "worker-00000" / "_run" / "worker.pid"
        while time.monotonic() < deadline and not killed:
            if pidfile.exists() and (out / "worker-00000" / "part-00000.parquet").exists():
                pid = int(pidfile.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.005)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    res = asyncio.run(batch_inference(family="cnn", dataset=str(data), output=str(out), slo_ms=1000.0, shard_size=100, job_id="job-killed"))
    th.join(timeout=5)
    assert killed, "the worker finished before it could be killed"
    ids = rows(out)
    assert len(ids) == len(set(ids)) == 12_000 and sorted(ids) == input_ids(data)
    log = (out / "worker-00000" / "_run" / "worker.log").read_text()
    assert log.count("--- ") == 2  # started twice: the crash and the retry
    import json

    report = json.loads((out / "worker-00000" / "_run" / "report.json").read_text())
    assert report["shards_skipped"] >= 1 and report["complete"]
    assert res.measurement.items == report["items"] < 12_000  # the retry measured only what it ran


def test_simulated_launcher_drives_a_gpu_cluster_in_parts(settings_env, shared_data):
    settings_env()
    res = asyncio.run(
        batch_inference(family="resnet", launcher="simulated", items=4000, items_per_worker=1000, slo_ms=300.0, job_id="job-sim")
    )
    assert res.parts == 4 and res.output is None
    m = res.measurement
    assert m.simulated and m.energy_source == "simulated" and m.items == 4000
    (run,) = runs_of("job-sim", experiment="oltunes-simulation")
    assert run.data.tags[cv.TAG_SIMULATED] == "true" and run.data.tags[cv.TAG_ENERGY_SOURCE] == "simulated"
    assert run.data.params["accelerator"] != "cpu" or res.decision.pool.startswith("cpu")
    # simulated measurements stay out of the real tuner's state
    real = tuner_state() if get_settings().tuner_state_path.exists() else None
    assert real is None or not real.has_seen(m.measurement_id)


def test_flow_runs_are_named_after_their_job(settings_env, shared_data):
    """Prefect runs tell jobs apart: the job id names the run; a job without one takes its run's id."""
    from prefect import get_client

    async def name_of(state) -> str:
        async with get_client() as client:
            return (await client.read_flow_run(state.state_details.flow_run_id)).name

    settings_env()
    kw = dict(family="resnet", launcher="simulated", items=1000, items_per_worker=1000, slo_ms=300.0)
    named = asyncio.run(batch_inference(job_id="job-named", return_state=True, **kw))
    assert asyncio.run(name_of(named)) == "batch-resnet-job-named"
    anonymous = asyncio.run(batch_inference(return_state=True, **kw))
    job_id = anonymous.result().measurement.job_id
    assert job_id == str(anonymous.state_details.flow_run_id).replace("-", "")
    assert asyncio.run(name_of(anonymous)) == f"batch-resnet-{job_id[:8]}"


def test_a_job_that_fails_after_its_decision_leaves_a_failed_run_spanning_it(settings_env, dataset, tmp_path):
    """A part that cannot finish in time (a real worker, a real timeout, retried) fails the job; its run says so."""
    settings_env()
    t0 = time.time()
    with pytest.raises(WorkerError, match="timeout"):
        asyncio.run(batch_inference(family="cnn", dataset=str(dataset), output=str(tmp_path / "o"), slo_ms=500.0,
                                    job_id="job-fails", part_timeout_s=0.05))  # fmt: skip
    (run,) = runs_of("job-fails")
    assert run.info.status == "FAILED" and t0 * 1000 <= run.info.start_time < run.info.end_time
    assert run.data.tags[cv.TAG_FAILURE].startswith("WorkerError") and run.data.metrics == {}
    assert run.data.params["variant"] and run.data.tags[cv.TAG_DECISION_ID]
    (ds,) = run.inputs.dataset_inputs
    assert ds.dataset.name == dataset.stem
