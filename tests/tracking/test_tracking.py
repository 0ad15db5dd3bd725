"""Tracking against a real MLflow SQLite store; 'unreachable' is a real closed loopback port."""

from __future__ import annotations

import shutil
import socket

import pytest
from mlflow import MlflowClient

from oltunes.errors import OLTunesError
from oltunes.tracking import Tracker
from oltunes.tracking import conventions as cv
from oltunes.types import Candidate, Decision, Explanation, Measurement, Prediction, Variant


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    return f"sqlite:///{root / 'mlflow.db'}", root


@pytest.fixture
def tracker(store, tmp_path):
    uri, root = store
    return Tracker(uri=uri, buffer_dir=tmp_path / "buffer", artifact_root=root / "artifacts")


def closed_port_uri() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


VARIANT = Variant(family="cnn", name="cnn-s-fp32", size="s", precision="fp32", accuracy=0.9)
CAND = Candidate(pool="cpu-1core", accelerator="cpu", variant=VARIANT, batch_size=8, concurrency=2)


def make_measurement(kind="batch", **kw) -> Measurement:
    base = dict(
        job_id="job-1",
        kind=kind,
        candidate=CAND,
        items=100,
        wall_s=2.0,
        latency_p50_ms=10.0,
        latency_p95_ms=15.0,
        latency_p99_ms=20.0,
        throughput_items_per_s=50.0,
        energy_j_per_item=0.3,
        energy_source="estimated",
        accuracy=0.88,
    )
    return Measurement(**{**base, **kw})


def decision() -> Decision:
    return Decision(
        job_id="job-1",
        candidate=CAND,
        explanation=Explanation(
            predicted=Prediction(latency_p99_ms=18, energy_j_per_item=0.2, throughput_items_per_s=60),
            n_candidates=4,
            n_feasible=2,
        ),
    )


def test_batch_run_follows_the_conventions_and_rebuilds_history(tracker, store):
    m = make_measurement(kind="batch")
    d = decision()
    rid = tracker.log_measurement(m, experiment="t-conv", slo_ms=25.0, policy="fm-ftml", decision=d)
    run = MlflowClient(store[0]).get_run(rid)
    assert run.data.params["variant"] == "cnn-s-fp32" and run.data.params["batch_size"] == "8"
    assert run.data.params["pool"] == "cpu-1core" and "decision_id" not in run.data.params
    assert run.data.tags[cv.TAG_DECISION_ID] == d.decision_id and run.data.tags[cv.TAG_MEASUREMENT_ID] == m.measurement_id
    assert run.data.metrics[cv.LATENCY_P99] == 20.0 and run.data.metrics[cv.SLO_MET] == 1.0
    assert run.data.metrics[cv.ENERGY] == 0.3 and run.data.metrics[cv.ACCURACY] == 0.88
    assert run.data.tags[cv.TAG_ENERGY_SOURCE] == "estimated" and run.data.tags[cv.TAG_SIMULATED] == "false"
    assert run.data.tags[cv.TAG_POLICY] == "fm-ftml" and run.data.tags[cv.TAG_JOB] == "job-1"
    exp = MlflowClient(store[0]).get_experiment_by_name("t-conv")
    assert run.info.experiment_id == exp.experiment_id
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # MLflow 3 UI: the ML view, not GenAI
    assert [h.measurement_id for h in tracker.history(kinds=("t-conv-none",))] == []
    got = [h for h in tracker.history(kinds=("batch", "streaming")) if h.measurement_id == m.measurement_id]
    assert got == []  # logged under a custom experiment, not the batch one
    rid2 = tracker.log_measurement(m, slo_ms=25.0)
    assert rid2 != rid
    hist = [h for h in tracker.history() if h.measurement_id == m.measurement_id]
    assert hist == [m]


def test_same_measurement_is_logged_once(tracker, store):
    m = make_measurement()
    r1 = tracker.log_measurement(m, experiment="t-once")
    r2 = tracker.log_measurement(m, experiment="t-once")
    assert r1 == r2
    eid = MlflowClient(store[0]).get_experiment_by_name("t-once").experiment_id
    assert len(MlflowClient(store[0]).search_runs([eid])) == 1


def test_unreachable_mlflow_buffers_then_replays_exactly_once(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    buf = tmp_path / "buffer"
    down = Tracker(uri=closed_port_uri(), buffer_dir=buf)
    ms = [make_measurement(job_id=f"j{i}") for i in range(3)]
    for m in ms:
        assert down.log_measurement(m, experiment="t-buffer") is None
    assert down.log_measurement(ms[0], experiment="t-buffer") is None
    assert down.pending() == 3  # the repeated one is buffered once
    kept = tmp_path / "kept"
    shutil.copytree(buf, kept)  # to replay again, as if a crash hit between "accepted" and "deleted"

    up = Tracker(uri=store[0], buffer_dir=buf, artifact_root=store[1] / "artifacts")
    assert up.flush() == 3 and up.pending() == 0
    shutil.rmtree(buf)
    shutil.copytree(kept, buf)
    assert up.flush() == 3  # replayed again...
    eid = MlflowClient(store[0]).get_experiment_by_name("t-buffer").experiment_id
    runs = MlflowClient(store[0]).search_runs([eid])
    assert sorted(r.data.tags[cv.TAG_KEY] for r in runs) == sorted(m.measurement_id for m in ms)  # ...once each


def test_history_includes_buffered_measurements_and_unreachable_history_is_clear(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    down = Tracker(uri=closed_port_uri(), buffer_dir=tmp_path / "b")
    m = make_measurement()
    down.log_measurement(m)
    with pytest.raises(OLTunesError, match="unreachable"):
        down.history()
    up = Tracker(uri=store[0], buffer_dir=tmp_path / "b")  # not flushed yet
    assert m in up.history()
    assert m not in up.history(include_buffered=False)


def test_streaming_service_logs_steps_in_one_run_and_replay_skips_landed_steps(tracker, store, tmp_path, monkeypatch):
    svc = tracker.service("svc-1", candidate=CAND, params={"trace": "x"}, steps_per_batch=2)
    steps = [make_measurement(kind="streaming", latency_p99_ms=10.0 + i) for i in range(3)]
    for i, m in enumerate(steps):
        svc.log_step(i, m, slo_ms=11.5, extra_metrics={"requests_failed": 0})
    # the same step again (e.g. a replayed buffer) must not add a point
    svc.log_step(1, steps[1], slo_ms=11.5)
    svc.end()
    c = MlflowClient(store[0])
    eid = c.get_experiment_by_name(cv.experiment_for("streaming")).experiment_id
    runs = c.search_runs([eid], filter_string=f"tags.`{cv.TAG_SERVICE}` = 'svc-1'")
    assert len(runs) == 1
    rid = runs[0].info.run_id
    hist = c.get_metric_history(rid, cv.LATENCY_P99)
    assert [(h.step, h.value) for h in sorted(hist, key=lambda h: h.step)] == [(0, 10.0), (1, 11.0), (2, 12.0)]
    assert [h.value for h in sorted(c.get_metric_history(rid, cv.SLO_MET), key=lambda h: h.step)] == [1, 1, 0]
    assert runs[0].data.params["trace"] == "x" and runs[0].info.status == "FINISHED"
    assert runs[0].info.start_time == svc.start_ms <= runs[0].info.end_time  # the run spans the service
    assert not any(k.startswith(cv.TAG_MEASUREMENT) for k in runs[0].data.tags)  # records are artifacts
    assert sorted(f.path for f in c.list_artifacts(rid, cv.STEPS_DIR)) == [cv.steps_chunk(0, 1), cv.steps_chunk(2, 2)]
    got = {m.measurement_id for m in tracker.history(kinds=("streaming",))}
    assert {m.measurement_id for m in steps} <= got


def tiny_onnx(path, scale: float):
    """A real ONNX model (y = x * scale), so the registry test logs a model ONNX Runtime could load."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.array([scale], dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])], initializer=[w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_every_variant_is_a_logged_onnx_model_registered_per_family_with_a_preferred_alias(tracker, store, tmp_path):
    a = VARIANT.model_copy(update={"path": tiny_onnx(tmp_path / "a.onnx", 2.0)})
    b = VARIANT.model_copy(update={"name": "cnn-m-fp32", "size": "m", "accuracy": 0.95,
                                   "path": tiny_onnx(tmp_path / "b.onnx", 3.0)})  # fmt: skip
    first = tracker.register_variants([a, b], preferred=a, measured_accuracy=0.87)
    assert set(first) == {a.name, b.name} and first[a.name] != first[b.name]
    again = tracker.register_variants([a, b], preferred=b, measured_accuracy=0.93)
    assert again == first  # same files: same versions, nothing logged twice
    c = MlflowClient(store[0])
    name = "oltunes.cnn"
    assert str(c.get_model_version_by_alias(name, "preferred").version) == first[b.name]
    assert len(c.search_model_versions(f"name = '{name}'")) == 2
    mv_a = c.get_model_version(name, first[a.name])
    assert mv_a.tags["measured_accuracy"] == "0.87" and mv_a.tags["variant"] == a.name
    run_b = c.get_run(c.get_model_version(name, first[b.name]).run_id)
    assert run_b.data.metrics["accuracy"] == 0.95 and run_b.data.metrics["measured_accuracy"] == 0.93
    source = c.get_model_version(name, first[b.name]).source
    assert source.startswith("models:/")  # the version is the logged model, not a loose file
    model = c.get_logged_model(source.removeprefix("models:/"))
    assert model.model_type == "onnx" and any(m.key == "accuracy" and m.value == 0.95 for m in model.metrics)
    import onnx
    from mlflow.artifacts import download_artifacts

    local = download_artifacts(c.get_model_version_download_uri(name, first[b.name]), dst_path=str(tmp_path / "dl"),
                               tracking_uri=store[0])  # fmt: skip
    w = onnx.numpy_helper.to_array(onnx.load(f"{local}/model.onnx").graph.initializer[0])
    assert w.tolist() == [3.0]  # the variant's own weights, loadable from the registry


def test_streaming_steps_neither_search_nor_read_the_run(tracker, monkeypatch):
    """O(1) per step by construction: the run id is held, and one log_batch carries a whole chunk of steps."""
    svc = tracker.service("svc-calls", candidate=CAND, steps_per_batch=10, system_metrics_s=None)
    client = tracker._client()
    calls: dict[str, int] = {}
    for name in ("search_runs", "get_run", "log_batch", "log_text", "set_tag", "log_metric"):
        real = getattr(client, name)
        monkeypatch.setattr(client, name, lambda *a, _r=real, _n=name, **k: (calls.__setitem__(_n, calls.get(_n, 0) + 1), _r(*a, **k))[1])
    for i in range(25):
        svc.log_step(i, make_measurement(kind="streaming"))
    svc.end()
    assert calls == {"log_batch": 3, "log_text": 3}  # chunks of 10, 10, 5; nothing read back, nothing searched


def test_streaming_run_carries_mlflow_system_metrics(tracker, store):
    import time

    svc = tracker.service("svc-sys", candidate=CAND, system_metrics_s=0.5)
    c = MlflowClient(store[0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(k.startswith("system/") for k in c.get_run(svc.run_id).data.metrics):
        time.sleep(0.5)
    svc.end()
    metrics = c.get_run(svc.run_id).data.metrics
    assert "system/cpu_utilization_percentage" in metrics and "system/system_memory_usage_megabytes" in metrics


def test_a_batch_run_spans_its_job_logs_its_dataset_and_takes_its_status_from_the_outcome(tracker, store, tmp_path):
    import json
    import time

    from oltunes.atomic import sha256_file

    data = tmp_path / "inputs" / "images.parquet"
    data.parent.mkdir()
    data.write_bytes(b"PAR1 not really, but a file with content" * 10)
    m = make_measurement(job_id="job-span")
    started = time.time() - 30.0
    rid = tracker.log_measurement(m, experiment="t-span", dataset=data, started_at=started)
    run = MlflowClient(store[0]).get_run(rid)
    assert run.info.start_time == int(started * 1000) and run.info.end_time - run.info.start_time >= 30_000
    assert run.info.status == "FINISHED"
    (ds,) = run.inputs.dataset_inputs
    assert (ds.dataset.name, ds.dataset.digest) == ("images", sha256_file(data)[:16])
    assert json.loads(ds.dataset.source)["uri"] == data.resolve().as_uri()
    assert json.loads(ds.dataset.profile)["num_rows"] == m.items
    failed = tracker.log_run(experiment="t-span", key="job-span-failed", params=cv.decision_params(CAND),
                             started_at=started, status="FAILED")  # fmt: skip
    assert MlflowClient(store[0]).get_run(failed).info.status == "FAILED"


def test_a_job_failed_after_its_decision_has_one_failed_run_and_nothing_to_learn(tracker, store):
    import time

    d = decision().model_copy(update={"job_id": "job-failed"})
    started = time.time() - 5.0
    rid = tracker.log_failed_job(d, "WorkerError: part 0 timed out", policy="fm-ftml", started_at=started)
    assert tracker.log_failed_job(d, "WorkerError: part 0 timed out", started_at=started) == rid  # once per decision
    run = MlflowClient(store[0]).get_run(rid)
    assert run.info.status == "FAILED" and run.info.start_time == int(started * 1000) < run.info.end_time
    assert run.data.params["variant"] == CAND.variant.name and "decision_id" not in run.data.params
    assert run.data.tags[cv.TAG_DECISION_ID] == d.decision_id and run.data.tags[cv.TAG_JOB] == "job-failed"
    assert run.data.tags[cv.TAG_FAILURE] == "WorkerError: part 0 timed out" and run.data.metrics == {}
    assert not [m for m in tracker.history() if m.job_id == "job-failed"]
