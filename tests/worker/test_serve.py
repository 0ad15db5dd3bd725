"""Serve mode over real HTTP on loopback: dynamic batching, metrics, 4xx handling, graceful drain."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from oltunes.errors import WorkerError
from oltunes.worker import read_dataset, serve_process
from oltunes.zoo import make_dataset

MODEL = "models/cnn-s-fp32.onnx"

pytestmark = pytest.mark.slow  # a real `oltunes worker serve` process per module (and per test below)


@pytest.fixture(scope="module")
def items(built_zoo, tmp_path_factory):
    data = read_dataset(make_dataset("cnn", 64, tmp_path_factory.mktemp("serve") / "in.npz"))
    sess = ort.InferenceSession(str(built_zoo / MODEL), providers=["CPUExecutionProvider"])
    return data.x, sess.run(None, {"x": data.x})[0].argmax(1)


@pytest.fixture(scope="module")
def server(built_zoo):
    # a long queue delay makes concurrent requests share a batch reliably even on a loaded machine
    with serve_process(built_zoo / MODEL, max_batch=16, max_delay_ms=100) as srv:
        yield srv
    assert srv.proc.returncode == 0, srv.log_tail()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        c.get("/window", params={"reset": "true"})
        yield c


def test_binds_loopback_and_reports_health(server, client):
    assert server.host == "127.0.0.1"
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["provider"] == "CPUExecutionProvider" and h["device"] == "cpu"
    assert h["input_shape"] == [None, 1, 8, 8]


def test_predictions_match_a_bare_session(client, items):
    x, expected = items
    r = client.post("/infer", json={"inputs": x[:5].tolist(), "ids": [10, 11, 12, 13, 14]})
    assert r.status_code == 200
    body = r.json()
    assert body["predictions"] == expected[:5].tolist() and body["ids"] == [10, 11, 12, 13, 14]
    flat = client.post("/infer", json={"inputs": x[5:7].reshape(2, 64).tolist()}).json()  # flat items are fine too
    assert flat["predictions"] == expected[5:7].tolist()


BAD = [
    ({"inputs": []}, 422, "at least 1 item"),
    ({"rows": [[0.0] * 64]}, 422, "Field required"),
    ({"inputs": [[0.0] * 63]}, 400, "64 values per item"),
    ({"inputs": [[0.0] * 64, [0.0] * 32]}, 400, "equally shaped"),
    ({"inputs": [["a"] * 64]}, 400, "numeric"),
    ({"inputs": [[0.0] * 64], "ids": [1, 2]}, 400, "'ids' has 2 entries"),
    ({"inputs": [[0.0] * 64] * 5000}, 413, "limit is 4096"),
]


def test_malformed_requests_get_4xx_with_a_reason_and_the_server_keeps_serving(client, items):
    x, expected = items
    for body, status, reason in BAD:
        r = client.post("/infer", json=body)
        assert r.status_code == status, (body, r.text)
        assert reason in r.text
    r = client.post("/infer", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    good = client.post("/infer", json={"inputs": x[:1].tolist()})
    assert good.status_code == 200 and good.json()["predictions"] == expected[:1].tolist()
    m = client.get("/window").json()
    assert m["requests"] == len(BAD) + 2 and m["errors"] == len(BAD) + 1
    assert m["errors_by_status"] == {"400": 4, "413": 1, "422": 3}
    assert m["items"] == 1


def test_concurrent_requests_are_batched(server, client, items):
    x, expected = items
    n = 16

    def one(i: int) -> dict:
        return httpx.post(f"{server.url}/infer", json={"inputs": x[i : i + 1].tolist()}, timeout=30).json()

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(one, range(n)))
    assert [a["predictions"][0] for a in answers] == expected[:n].tolist()
    m = client.get("/window", params={"reset": "true"}).json()
    assert m["requests"] == m["items"] == n and m["errors"] == 0
    assert m["batches"] < n and m["batch_size_mean"] > 1  # requests really shared session calls
    assert max(a["batch_items"] for a in answers) > 1
    hist = {int(k): v for k, v in m["batch_size_histogram"].items()}
    assert sum(k * v for k, v in hist.items()) == n and max(hist) <= 16
    for prefix in ("request_latency", "batch_latency", "latency"):
        assert 0 < m[f"{prefix}_p50_ms"] <= m[f"{prefix}_p95_ms"] <= m[f"{prefix}_p99_ms"]
    assert m["request_latency_p50_ms"] >= m["batch_latency_p50_ms"]
    assert m["throughput_items_per_s"] > 0 and m["queue_depth"] == 0
    # the read above reset the window
    after = client.get("/window").json()
    assert after["requests"] == 0 and after["batches"] == 0 and after["request_latency_p99_ms"] is None


def test_a_request_larger_than_max_batch_runs_as_one_batch(client, items):
    x, expected = items
    r = client.post("/infer", json={"inputs": x[:40].tolist()}).json()
    assert r["predictions"] == expected[:40].tolist() and r["batch_items"] == 40


def test_shutdown_answers_every_queued_request(built_zoo, items):
    x, expected = items
    # a 20 s queue delay: the requests are still waiting when the signal comes; shutdown must flush them now
    with serve_process(built_zoo / MODEL, max_batch=64, max_delay_ms=20_000, concurrency=2, threads=1) as srv:
        answers: list[httpx.Response] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            r = httpx.post(f"{srv.url}/infer", json={"inputs": x[i : i + 1].tolist()}, timeout=30)
            with lock:
                answers.append(r)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{srv.url}/window").json()["queue_requests"] < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        m = httpx.get(f"{srv.url}/window").json()
        assert (m["queue_depth"], m["concurrency"]) == (5, 2)
        t0 = time.monotonic()
        code = srv.stop()  # SIGTERM while 5 requests wait in the queue
        stopped_in = time.monotonic() - t0
        for t in threads:
            t.join(30)
    assert code == 0 and stopped_in < 10, (code, stopped_in)
    assert sorted(r.status_code for r in answers) == [200] * 5
    assert sorted(r.json()["predictions"][0] for r in answers) == sorted(expected[:5].tolist())


def test_serve_process_reports_why_it_could_not_start(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(WorkerError, match="could not be loaded"):
        serve_process(bad, startup_timeout_s=60)


# -- Open Inference Protocol, limits, admission, Prometheus ---------------------------------------------------
def test_tritonclient_infers_with_binary_and_json_tensors(server, items):
    import tritonclient.http as triton

    x, expected = items
    c = triton.InferenceServerClient(server.url.removeprefix("http://"))
    name = "cnn-s-fp32"  # default served name: the model file stem
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready(name)
    meta = c.get_model_metadata(name)
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]
    assert meta["outputs"][0]["shape"] == [-1, 10]
    for binary in (True, False):
        inp = triton.InferInput("x", [4, 1, 8, 8], "FP32")
        inp.set_data_from_numpy(x[:4], binary_data=binary)
        res = c.infer(name, [inp], outputs=[triton.InferRequestedOutput("logits", binary_data=binary)], request_id="r-7")
        assert res.as_numpy("logits").argmax(1).tolist() == expected[:4].tolist()
        assert res.get_response()["id"] == "r-7"
    with pytest.raises(triton.InferenceServerException, match="unknown model"):
        c.infer("other", [inp])


def test_oversized_body_gets_413_before_parsing_and_is_not_echoed(server):
    body = b'{"inputs": [' + b'"Zq7",' * 3_000_000 + b'"Zq7"]}'  # 18 MB, over the 16 MiB default
    r = httpx.post(f"{server.url}/v2/models/cnn-s-fp32/infer", content=body, timeout=60)
    assert r.status_code == 413 and "over the limit" in r.json()["error"] and b"Zq7" not in r.content
    assert httpx.get(f"{server.url}/v2/health/ready").status_code == 200


def test_the_bare_infer_route_answers_in_the_protocols_shape_and_leaves_the_rest_to_fastapi(server, items):
    """`POST .../infer` bypasses FastAPI (`oltunes.worker.infer_route`): its errors, its counts and the paths
    around it must still behave as the framework's did."""
    x, expected = items
    url, name = server.url, "cnn-s-fp32"
    body = {"inputs": [{"name": "x", "shape": [2, 1, 8, 8], "datatype": "FP32", "data": x[:2].ravel().tolist()}], "id": "Zq7"}
    with httpx.Client(base_url=url, timeout=30) as h:
        def status_count(status: str) -> float:
            line = f'oltunes_worker_requests_total{{model="{name}",status="{status}"}} '
            return next((float(ln.split()[-1]) for ln in h.get("/metrics").text.splitlines() if ln.startswith(line)), 0.0)

        before = {s: status_count(s) for s in ("200", "400", "404")}
        ok = h.post(f"/v2/models/{name}/versions/1/infer", json=body)
        out = ok.json()["outputs"][0]
        assert ok.status_code == 200 and ok.json()["id"] == "Zq7" and out["shape"] == [2, 10]
        assert np.asarray(out["data"]).reshape(2, 10).argmax(1).tolist() == expected[:2].tolist()
        unknown = h.post("/v2/models/Zq7-model/infer", json=body)
        assert unknown.status_code == 404 and "unknown model" in unknown.json()["error"] and "Zq7" not in unknown.text
        broken = h.post(f"/v2/models/{name}/infer", content=b'{"Zq7": [1, 2', headers={"content-type": "application/json"})
        assert broken.status_code == 400 and "Zq7" not in broken.text
        assert h.get(f"/v2/models/{name}/infer").status_code in (404, 405)  # not inference: FastAPI's answer
        assert h.get(f"/v2/models/{name}").json()["name"] == name
        assert {s: status_count(s) - before[s] for s in before} == {"200": 1, "400": 1, "404": 1}


def test_admission_refuses_with_429_once_the_predicted_wait_is_over_the_budget(built_zoo, items):
    x, _ = items
    body = {"inputs": x[:1].tolist()}
    # a budget no request can meet once the worker has measured one batch
    with serve_process(built_zoo / MODEL, max_delay_ms=0, max_queue_ms=1e-6) as srv:
        first = httpx.post(f"{srv.url}/infer", json=body, timeout=30)
        second = httpx.post(f"{srv.url}/infer", json=body, timeout=30)
        window = httpx.get(f"{srv.url}/window").json()
        text = httpx.get(f"{srv.url}/metrics").text
    assert first.status_code == 200  # nothing measured yet: admitted
    assert second.status_code == 429 and int(second.headers["retry-after"]) >= 1
    assert "queueing delay" in second.json()["error"] and window["measured_items_per_s"] > 0
    assert 'oltunes_worker_requests_total{model="cnn-s-fp32",status="429"} 1.0' in text
    assert 'oltunes_worker_requests_total{model="cnn-s-fp32",status="200"} 1.0' in text


def test_prometheus_metrics_count_requests_batches_and_latency(server, client, items):
    from prometheus_client.parser import text_string_to_metric_families

    x, _ = items

    def samples() -> dict[tuple, float]:
        text = client.get("/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}

    before = samples()
    for k in range(3):
        assert client.post("/infer", json={"inputs": x[k : k + 2].tolist()}).status_code == 200
    assert client.post("/infer", json={"inputs": []}).status_code == 422
    after = samples()

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted({"model": "cnn-s-fp32", **labels}.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("oltunes_worker_requests_total", status="200") == 3
    assert delta("oltunes_worker_request_latency_seconds_count") == 3
    assert delta("oltunes_worker_batch_size_sum") == 6  # items, whatever the batching
    assert ("oltunes_worker_queue_depth", (("model", "cnn-s-fp32"),)) in after


def test_a_request_head_over_64_kib_is_refused_and_the_worker_keeps_serving(server):
    """uvicorn alone reads headers without a bound; the worker's guarded protocol stops at 64 KiB."""
    import socket

    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
        assert s.recv(200).startswith(b"HTTP/1.1 400")
    assert httpx.get(f"{server.url}/health", headers={"x-small": "a" * 1000}).status_code == 200
