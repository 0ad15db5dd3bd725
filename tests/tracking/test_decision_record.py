"""A decision's explanation in MLflow (issue 32): artifacts per decision, chosen / would-have-chosen tags, the run's
description, J/item also in mJ, and the served variant's logged model as the run's model output (a real SQLite
store)."""

from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient

from oltunes.inventory import pools_from_data
from oltunes.tracking import Tracker
from oltunes.tracking import conventions as cv
from oltunes.tracking.decisions import DECISIONS_DIR, TAG_CHOSEN, TAG_WOULD_HAVE_CHOSEN, explanation_text
from oltunes.tuner.tuner import Tuner
from oltunes.types import ClusterState, Decision, JobSpec, Measurement
from tests.tracking.test_tracking import closed_port_uri, tiny_onnx
from tests.tuner.variants import make_variants


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-decisions")
    return f"sqlite:///{root / 'mlflow.db'}", root


@pytest.fixture
def tracker(store, tmp_path):
    uri, root = store
    return Tracker(uri=uri, buffer_dir=tmp_path / "buffer", artifact_root=root / "artifacts")


POOLS = pools_from_data({"pools": [{"name": "cpu-2core", "accelerator": "cpu", "count": 1, "slots_per_device": 2},
                                   {"name": "l4-pool", "accelerator": "l4", "count": 1, "slots_per_device": 4}]})


def real_decision(job_id: str = "job-1", kind: str = "batch") -> Decision:
    tuner = Tuner(make_variants(), seed=0)
    job = JobSpec(job_id=job_id, kind=kind, family="cnn", slo_ms=500, items=5000,
                  arrival_rate_rps=20.0 if kind == "streaming" else 0.0)
    return tuner.decide(job, ClusterState(pools=POOLS))


def measured(d: Decision, energy: float = 0.00123, **kw) -> Measurement:
    return Measurement(job_id=d.job_id, decision_id=d.decision_id, candidate=d.candidate, items=5000, wall_s=2.0,
                       latency_p50_ms=3.0, latency_p95_ms=4.0, latency_p99_ms=5.0, throughput_items_per_s=2500.0,
                       energy_j_per_item=energy, energy_source="estimated", **kw)


def _artifact(c: MlflowClient, rid: str, path: str, tmp_path) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    with open(c.download_artifacts(rid, path, str(tmp_path))) as f:
        return f.read()


def test_a_batch_run_carries_its_decision_explanation(tracker, store, tmp_path):
    d = real_decision()
    rid = tracker.log_measurement(measured(d), experiment="t-expl", slo_ms=500, decision=d)
    c = MlflowClient(store[0])
    run = c.get_run(rid)
    files = sorted(f.path for f in c.list_artifacts(rid, DECISIONS_DIR))
    assert files == [f"{DECISIONS_DIR}/{d.decision_id}.json", f"{DECISIONS_DIR}/{d.decision_id}.txt"]
    saved = Decision.model_validate(json.loads(_artifact(c, rid, files[0], tmp_path)))
    assert saved.explanation == d.explanation  # the whole explanation, runner-ups and reasons included
    text = _artifact(c, rid, files[1], tmp_path / "t")
    assert d.candidate.key in text and all(a.reason in text for a in d.explanation.runner_ups)
    assert run.data.tags[TAG_CHOSEN] == d.candidate.key
    assert run.data.tags[TAG_WOULD_HAVE_CHOSEN] == (d.explanation.would_have_chosen or "the chosen")
    assert run.data.tags["mlflow.note.content"] == explanation_text(d)  # the run page's description
    assert run.data.metrics[cv.ENERGY_MJ] == pytest.approx(1.23)  # significant digits a 3-decimal table keeps
    assert list(run.data.metrics)[:2] == [cv.LATENCY_P99, cv.ENERGY_MJ]  # compare views open on the first metric


def test_a_failed_job_keeps_its_decision_too(tracker, store):
    d = real_decision("job-failed")
    rid = tracker.log_failed_job(d, "RuntimeError: worker died")
    c = MlflowClient(store[0])
    assert {f.path for f in c.list_artifacts(rid, DECISIONS_DIR)} == {
        f"{DECISIONS_DIR}/{d.decision_id}.json", f"{DECISIONS_DIR}/{d.decision_id}.txt"}
    assert c.get_run(rid).data.tags[TAG_CHOSEN] == d.candidate.key


def test_a_buffered_run_lands_with_its_decision(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    d = real_decision("job-buffered")
    down = Tracker(uri=closed_port_uri(), buffer_dir=tmp_path / "b")
    assert down.log_measurement(measured(d), experiment="t-expl-buf", decision=d) is None
    up = Tracker(uri=store[0], buffer_dir=tmp_path / "b", artifact_root=store[1] / "artifacts")
    assert up.flush() == 1
    c = MlflowClient(store[0])
    run = c.search_runs([c.get_experiment_by_name("t-expl-buf").experiment_id])[0]
    assert len(c.list_artifacts(run.info.run_id, DECISIONS_DIR)) == 2 and run.data.tags[TAG_CHOSEN]


def test_a_streaming_run_keeps_each_decision_and_sits_with_training_runs(tracker, store, tmp_path):
    """Each new decision (the first, each switch) leaves its explanation; the served variant's logged model is the
    run's model output, which MLflow 3's GenAI view needs to list the run under *Training runs*, not
    *Evaluations*."""
    first, second = real_decision("svc-job", "streaming"), real_decision("svc-job", "streaming")
    for d in (first, second):  # the zoo registered the served variant (a real ONNX file)
        variant = d.candidate.variant.model_copy(update={"path": tiny_onnx(tmp_path / f"{d.decision_id}.onnx", 2.0)})
        tracker.register_variants([variant])
    svc = tracker.service("svc-expl", candidate=first.candidate, steps_per_batch=2, system_metrics_s=None)
    svc.log_step(0, measured(first, kind="streaming"), decision=first)
    svc.log_step(1, measured(first, kind="streaming"), decision=first)  # the same decision: nothing again
    svc.log_step(2, measured(second, kind="streaming"), decision=second)
    svc.end()
    c = MlflowClient(store[0])
    paths = {f.path for f in c.list_artifacts(svc.run_id, DECISIONS_DIR)}
    assert paths == {f"{DECISIONS_DIR}/{d.decision_id}.{ext}" for d in (first, second) for ext in ("json", "txt")}
    run = c.get_run(svc.run_id)
    assert run.data.tags[TAG_CHOSEN] == second.candidate.key  # the latest decision's
    assert run.outputs is not None and run.outputs.model_outputs  # -> "Training runs" in the GenAI view


def test_a_run_of_a_variant_never_logged_has_no_model_output(tracker, store):
    d = real_decision("job-unlogged").model_copy()
    v = d.candidate.variant.model_copy(update={"name": "cnn-never-logged"})
    d = d.model_copy(update={"candidate": d.candidate.model_copy(update={"variant": v})})
    rid = tracker.log_measurement(measured(d), experiment="t-expl-nomodel", decision=d)
    run = MlflowClient(store[0]).get_run(rid)
    assert not (run.outputs and run.outputs.model_outputs)


def test_the_prefect_artifact_shows_the_values_it_ranked_on():
    """The markdown table ranks and shows the same quantity: the objective column holds each runner-up's ranked
    value beside the reason that quotes it."""
    from oltunes.tracking.report import decision_markdown

    d = real_decision("job-md", "streaming")
    md = decision_markdown(d, None)
    e = d.explanation
    assert f"| ranked on | {e.ranked_on}: {e.objective:.4g}" in md
    for a in e.runner_ups:
        row = next(line for line in md.splitlines() if line.startswith(f"| `{a.candidate_key}` |"))
        assert row.split(" | ")[1] == (f"{a.objective:.4g}" if a.objective is not None else "–")
