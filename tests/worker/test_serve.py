"""Serve mode over real HTTP on loopback: dynamic batching, metrics, 4xx handling, graceful drain."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import onnxruntime as ort
import pytest

from oltunes.errors import WorkerError
from oltunes.worker import read_dataset, serve_process
from oltunes.zoo import make_dataset

MODEL = "models/cnn-s-fp32.onnx"


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
