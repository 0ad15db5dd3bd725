"""Hostile input and crashes against a real `oltunes tuner serve` process (issue 8: poisoning, oversize bodies,
path traversal, acknowledged-then-lost observations)."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from oltunes.tuner import Tuner
from oltunes.service.api import MAX_BODY_BYTES
from oltunes.client.tuner_client import TunerClient
from tests.tuner.serve_process import AUTH, TOKEN, ServeProcess
from tests.tuner.test_service import JOB, make_cluster, make_cluster_candidate, make_measurement

pytestmark = pytest.mark.slow


def _measurement_json(i: int) -> dict:
    return json.loads(make_measurement(make_cluster_candidate(), i).model_dump_json())


def _observe(http: httpx.Client, body: str) -> httpx.Response:
    return http.post("/v1/observe", content=body, headers={**AUTH, "Content-Type": "application/json"})


def _raw_request(port: int, head: bytes, body_chunks, read_limit: int = 1 << 20) -> tuple[int, bytes]:
    """Send `head` then the body chunks on a raw socket (stopping when the server has answered or closed), and
    read the answer: (status, raw response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        try:
            for chunk in body_chunks:
                s.sendall(chunk)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):  # the server answered and closed mid-body
            pass
        data = b""
        try:
            while len(data) < read_limit:
                part = s.recv(65536)
                if not part:
                    break
                data += part
        except ConnectionResetError:
            pass
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    return int(data.split(b" ", 2)[1]), data


def test_infinity_nan_and_huge_numbers_are_refused_naming_the_field_and_the_service_keeps_learning(tmp_path):
    with ServeProcess(tmp_path) as svc, httpx.Client(base_url=svc.url, timeout=30) as http:
        good = _measurement_json(0)
        for field, raw in (("latency_p99_ms", "Infinity"), ("energy_j_per_item", "NaN"),
                           ("throughput_items_per_s", "1e308"), ("items", "1" + "0" * 400)):
            body = json.dumps({**good, "measurement_id": f"bad-{field}", field: 0}).replace(
                f'"{field}": 0', f'"{field}": {raw}')
            r = _observe(http, body)
            assert r.status_code == 422, (field, r.text)
            assert field in r.json()["detail"][0]["field"], r.text
        assert _observe(http, json.dumps(good)).json()["accepted"] == 1
        r = http.post("/v1/recommend", json={"job": JOB.model_dump(mode="json"),
                                             "cluster": make_cluster().model_dump(mode="json")}, headers=AUTH)
        assert r.status_code == 200 and r.json()["decision"]["source"] != "fallback", r.text
        svc.stop()  # saving works: nothing non-finite reached the model
    restored = Tuner.load(svc.state)
    assert restored.n_observed == 1 and restored.has_seen("m-0") and not restored.has_seen("bad-latency_p99_ms")


def test_oversize_bodies_get_413_before_being_read_and_a_huge_id_is_refused_without_echo(tmp_path):
    with ServeProcess(tmp_path) as svc, httpx.Client(base_url=svc.url, timeout=60) as http:
        # 50 MB announced: the answer comes after the first 64 KB, so the body was neither read nor parsed
        head = (f"POST /v1/observe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {50 << 20}\r\n\r\n").encode()
        status, raw = _raw_request(svc.port, head, [b"[" + b" " * 65535])
        assert status == 413 and len(raw) < 1000, raw[:300]
        # no Content-Length (chunked): refused while streaming, once the limit is passed
        head = (f"POST /v1/observe HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        chunk = b" " * (1 << 20)
        chunks = [b"%x\r\n" % len(chunk) + chunk + b"\r\n"] * (MAX_BODY_BYTES // len(chunk) + 4) + [b"0\r\n\r\n"]
        status, raw = _raw_request(svc.port, head, chunks)
        assert status == 413 and len(raw) < 1000, raw[:300]

        huge_id = "x" * (1 << 20)
        r = _observe(http, json.dumps({**_measurement_json(1), "measurement_id": huge_id}))
        assert r.status_code == 422 and "measurement_id" in r.text
        assert len(r.content) < 2000 and "x" * 200 not in r.text  # named, never echoed
        r = _observe(http, json.dumps({**_measurement_json(2), huge_id: 1}))  # an unknown 1 MB key
        assert r.status_code == 422 and len(r.content) < 2000
        assert _observe(http, json.dumps(_measurement_json(3))).json()["accepted"] == 1
        assert http.get("/v1/state", headers=AUTH).json()["n_observed"] == 1


def test_traversal_ids_and_foreign_model_paths_are_refused(tmp_path):
    cluster = make_cluster().model_dump(mode="json")
    variant = make_cluster_candidate().variant.model_dump(mode="json")
    with ServeProcess(tmp_path) as svc, httpx.Client(base_url=svc.url, headers=AUTH, timeout=30) as http:
        for job_id in ("../../x", "a/b", ".hidden", "x" * 129, ""):
            r = http.post("/v1/recommend", json={"job": {**JOB.model_dump(mode="json"), "job_id": job_id},
                                                 "cluster": cluster})
            assert r.status_code == 422 and "job_id" in r.text, (job_id, r.text)
        for bad in ({"name": "../../../x"}, {"family": "../etc"}, {"path": "/etc/passwd"},
                    {"path": str(tmp_path / "home" / "zoo" / ".." / "evil.onnx")}):
            r = http.post("/v1/variants", json={"variants": [{**variant, **bad}]})
            assert r.status_code == 422, (bad, r.text)
            assert "passwd" not in r.text and "evil" not in r.text
        inside = str(tmp_path / "home" / "zoo" / "user" / "mine.onnx")  # the model store: allowed
        r = http.post("/v1/variants", json={"variants": [{**variant, "name": "mine", "path": inside}]})
        assert r.status_code == 200, r.text
        assert "/etc/passwd" not in json.dumps(http.get("/v1/variants").json())


def test_acknowledged_observations_survive_sigkill_including_a_flushed_outbox(tmp_path):
    svc = ServeProcess(tmp_path)
    outbox = tmp_path / "outbox"
    candidate = make_cluster_candidate()
    # Queued while the service is down (the client falls back to its outbox) ...
    with TunerClient(svc.url, token=TOKEN, outbox_dir=outbox, retry_after_s=0, timeout_s=2) as client:
        assert all(client.observe(make_measurement(candidate, i)) for i in range(5))
        assert client.pending == 5
    svc.start()
    try:
        with TunerClient(svc.url, token=TOKEN, outbox_dir=outbox, retry_after_s=0, timeout_s=30) as client:
            assert client.flush() == 5 and client.pending == 0  # ... delivered, then deleted from the outbox
            acked = [client.observe(make_measurement(candidate, i)) for i in range(5, 45)]
            assert acked == [True] * 40
        svc.kill()  # right after the last answer: no save ran (persist every hour)
        assert not svc.state.exists()
        svc.start()
        with httpx.Client(base_url=svc.url, headers=AUTH, timeout=30) as http:
            assert http.get("/v1/health").json()["n_observed_total"] == 45
            r = _observe(http, json.dumps([_measurement_json(i) for i in range(45)]))
            assert r.json() == {"accepted": 0, "duplicates": 45, "accepted_ids": []}  # exactly-once kept
        svc.kill()  # again, after the restart compacted the journal into the state
        svc.start()
        assert httpx.get(f"{svc.url}/v1/health", timeout=30).json()["n_observed_total"] == 45
        svc.stop()
    finally:
        svc.kill()
    assert Tuner.load(svc.state).n_observed == 45
