"""Issue 31, cases 3, 4 and 7, end to end on real processes and real sockets: 50 MB bodies on every route of the
worker, a slowloris flood on the gateway and on the worker, and a shape whose element count overflows int64."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from benchmarks.front_door import HalfOpenFlood, open_fds, valid_requests
from oltunes.worker import serve_process

pytestmark = pytest.mark.slow

MB = 1 << 20


@pytest.fixture(scope="module")
def worker(built_zoo):
    with serve_process(built_zoo / "models" / "cnn-s-fp32.onnx", model_name="cnn", max_delay_ms=1.0) as w:
        yield w


def _rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of `pid` in MiB, from /proc (the peak is the kernel's high-water mark)."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _gateway(route: str, *extra: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "oltunes.gateway", "--route", route, *extra], stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip() if proc.stdout else ""
    assert url.startswith("http"), "the gateway did not start"
    return proc, url


def test_case_3_four_concurrent_50_mb_bodies_on_every_route_keep_the_worker_under_300_mb(worker):
    """Every route, with a declared length and streamed without one: each body is refused (413) or left unread,
    none is buffered, and the worker's peak RSS over the whole attack stays under 300 MB."""
    body = b'{"inputs": [' + b"[0.5]," * (50 * MB // 6) + b"[0.5]]}"  # 50 MB of JSON a parser would take

    def streamed():
        for k in range(0, len(body), MB):
            yield body[k : k + MB]

    routes = [("POST", "/infer"), ("POST", "/v2/models/cnn/infer"), ("POST", "/v2/models/cnn/versions/1/infer"),
              ("GET", "/health"), ("POST", "/window")]  # fmt: skip
    seen: dict[tuple[str, bool], set[int]] = {}
    slowest = 0.0
    for method, path in routes:
        for declared in (True, False):

            def send(_: int) -> int:
                nonlocal slowest
                t0 = time.perf_counter()
                with httpx.Client(base_url=worker.url, timeout=60) as h:
                    r = h.request(method, path, content=body if declared else streamed())
                slowest = max(slowest, time.perf_counter() - t0)
                assert b"0.5" not in r.content  # never echoed
                return r.status_code

            with ThreadPoolExecutor(4) as pool:
                seen[(path, declared)] = set(pool.map(send, range(4)))
    for (path, declared), statuses in seen.items():
        if declared or path.endswith("infer"):  # a declared size is refused before a byte is read; a body route stops at the limit
            assert statuses == {413}, (path, declared, statuses)
        else:  # routes that read no body answer and drop it unread
            assert max(statuses) < 500, (path, statuses)
    current, peak = _rss_mb(worker.pid)
    assert peak <= 300, f"peak RSS {peak:.0f} MB"
    assert slowest < 30, slowest
    ok = httpx.post(f"{worker.url}/infer", json={"inputs": [[0.5] * 64]}, timeout=30)
    assert ok.status_code == 200 and current <= 300


@pytest.mark.parametrize("door", ["gateway", "worker"])
def test_case_7_a_shape_whose_element_count_overflows_is_a_400_not_a_500(worker, door):
    proc, url = _gateway(f"cnn={worker.url}") if door == "gateway" else (None, worker.url)
    try:
        for shape in ([2**62, 1, 8, 8], [2**63 - 1, 2, 8, 8], [2**40, 2**40, 8, 8]):
            body = {"inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": []}]}
            r = httpx.post(f"{url}/v2/models/cnn/infer", content=json.dumps(body), timeout=30)
            assert r.status_code == 400 and list(r.json()) == ["error"] and "inputs[0].shape" in r.json()["error"], r.text
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    assert "Traceback" not in worker.log_tail(20_000)


def test_case_4_gateway_serves_valid_requests_while_2000_half_open_connections_are_held(worker):
    """A flood four times the gateway's connection cap, re-opened as fast as the gateway closes it: valid requests
    (each on a new connection) still get >= 99 % answers, the gateway's fds stay near its cap, and once the flood
    stops re-opening, the connections it left are closed within the head deadline."""
    cap, header_timeout_s = 500, 3.0
    proc, url = _gateway(f"cnn={worker.url}", "--max-connections", str(cap), "--header-timeout-s", str(header_timeout_s))
    flood = None
    try:
        base_fds = open_fds(proc.pid)
        flood = HalfOpenFlood(int(url.rsplit(":", 1)[1]), 2000).start()
        ok, _ = valid_requests(url, 200)
        fds_under_flood = open_fds(proc.pid)
        evicted_or_timed_out = flood.reopened
        flood.stop_reopening()  # keep what is open
        deadline = time.monotonic() + header_timeout_s + 3.0
        while time.monotonic() < deadline and open_fds(proc.pid) > base_fds + 5:
            time.sleep(0.2)
        fds_after = open_fds(proc.pid)
    finally:
        if flood is not None:
            flood.stop()
        proc.terminate()
        proc.wait(30)
    assert ok >= 198, ok  # >= 99 %
    assert fds_under_flood <= base_fds + cap + 20, (fds_under_flood, base_fds)
    assert evicted_or_timed_out >= 1500  # four times the cap: the oldest made room
    assert fds_after <= base_fds + 5, (fds_after, base_fds)  # every half-open one closed by the deadline


def test_case_4_worker_closes_half_open_connections_at_its_head_deadline_and_keeps_serving(built_zoo):
    """The worker (uvicorn with the guard) under 2,000 half-open connections: valid requests are answered meanwhile,
    and the half-open ones are closed once the 10 s head deadline passes."""
    with serve_process(built_zoo / "models" / "cnn-s-fp32.onnx", model_name="cnn", max_delay_ms=1.0) as w:
        base_fds = open_fds(w.pid)
        port = int(w.url.rsplit(":", 1)[1])
        flood = HalfOpenFlood(port, 2000).start(reopen=False)
        try:
            accepted = time.monotonic() + 10
            while open_fds(w.pid) < base_fds + 1900 and time.monotonic() < accepted:  # the worker accepts the backlog
                time.sleep(0.1)
            t0 = time.monotonic()
            assert open_fds(w.pid) >= base_fds + 1900
            ok, _ = valid_requests(w.url, 100)
            while time.monotonic() - t0 < 20 and open_fds(w.pid) > base_fds + 5:
                time.sleep(0.5)
            closed_after_s = time.monotonic() - t0
            fds_after = open_fds(w.pid)
        finally:
            flood.stop()
    assert ok >= 99, ok
    assert fds_after <= base_fds + 5 and 8 < closed_after_s < 20, (fds_after, base_fds, closed_after_s)
