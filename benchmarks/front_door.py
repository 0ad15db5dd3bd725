"""Front-door benchmark: valid requests while a slowloris flood holds N half-open connections (issue 31, case 4).

A gateway process (``python -m oltunes.gateway``, default limits: a cap of half its fd limit, heads within 10 s)
routes ``cnn`` to one worker. Attacker processes (each holds at most ``--per-process`` sockets, so the flood is not
bounded by one process's fd limit) open ``--connections`` connections, send a request line and one header on each,
and re-open every connection the server closes, so N stay held from the attacker's side for the whole run. Meanwhile
a client sends valid inference requests, each on a new connection. Reported: the valid requests' success rate and
p99, the gateway's open fds (peak, sampled from /proc) against its cap, and how many attacker connections the
server closed (evicted at the cap or timed out).

    python -m benchmarks.front_door --connections 20000 --json front_door.json
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.common import parser, print_table, write_json

PARTIAL_HEAD = b"POST /v2/models/cnn/infer HTTP/1.1\r\nHost: flood\r\n"  # never finished


class HalfOpenFlood:
    """Holds `n` half-open connections to `port` in a thread, re-opening each one the server closes.

    `reopened` counts the connections the server closed (and this re-opened); `open_now` the ones held."""

    def __init__(self, port: int, n: int) -> None:
        self.port, self.n = port, n
        self.reopened = 0
        self.failed_connects = 0
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def open_now(self) -> int:
        return len(self._sel.get_map())

    def _open_one(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close = RST: no TIME_WAIT pile-up
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
            s.sendall(PARTIAL_HEAD)
        except OSError:
            s.close()
            self.failed_connects += 1
            return
        s.setblocking(False)
        self._sel.register(s, selectors.EVENT_READ)

    def start(self, reopen: bool = True) -> HalfOpenFlood:
        """Open the `n` connections; with `reopen`, keep re-opening those the server closes until `stop_reopening`."""
        for _ in range(self.n):
            self._open_one()
        if reopen:
            self._thread.start()
        return self

    def stop_reopening(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.05):
                s: socket.socket = key.fileobj  # type: ignore[assignment]
                self._sel.unregister(s)
                s.close()  # readable: the server answered (408/503) or closed it
                self.reopened += 1
            missing = self.n - self.open_now
            for _ in range(min(missing, 200)):  # re-open at a bounded pace, as a flood tool would
                self._open_one()

    def stop(self) -> None:
        self.stop_reopening()
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def valid_requests(url: str, n: int, timeout_s: float = 10.0) -> tuple[int, list[float]]:
    """`n` valid inference requests, each on a new connection: (how many got 200, their latencies in ms)."""
    body = {"inputs": [{"name": "x", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.5] * 64}]}
    ok, latencies = 0, []
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            r = httpx.post(f"{url}/v2/models/cnn/infer", json=body, timeout=timeout_s)
            ok += r.status_code == 200
        except httpx.HTTPError:
            pass
        latencies.append((time.perf_counter() - t0) * 1e3)
    return ok, latencies


def _attacker(port: int, n: int, seconds: float, out: Any) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    flood = HalfOpenFlood(port, n).start()
    out.put(("held", flood.open_now))
    time.sleep(seconds)
    out.put(("done", flood.open_now, flood.reopened, flood.failed_connects))
    flood.stop()


def run(connections: int, per_process: int, requests: int, zoo: Path) -> dict[str, Any]:
    from oltunes.worker import serve_process

    with serve_process(zoo / "models" / "cnn-s-fp32.onnx", model_name="cnn", max_delay_ms=1.0) as worker:
        gw = subprocess.Popen([sys.executable, "-m", "oltunes.gateway", "--route", f"cnn={worker.url}"], stdout=subprocess.PIPE, text=True)
        try:
            url = gw.stdout.readline().strip()  # type: ignore[union-attr]
            port = int(url.rsplit(":", 1)[1])
            base_fds = open_fds(gw.pid)
            ok0, _ = valid_requests(url, 20)
            out: Any = mp.get_context("spawn").Queue()
            shares = [min(per_process, connections - k) for k in range(0, connections, per_process)]
            procs = [mp.get_context("spawn").Process(target=_attacker, args=(port, share, 3600, out), daemon=True) for share in shares]
            t0 = time.perf_counter()
            for p in procs:
                p.start()
            held = sum(out.get(timeout=600)[1] for _ in procs)
            ramp_s = time.perf_counter() - t0
            peak = [open_fds(gw.pid)]
            sampler_stop = threading.Event()

            def sample() -> None:
                while not sampler_stop.wait(0.2):
                    peak.append(open_fds(gw.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            ok, lat = valid_requests(url, requests)
            sampler_stop.set()
            sampler.join()
            for p in procs:
                p.terminate()
            for p in procs:
                p.join(30)
        finally:
            gw.terminate()
            gw.wait(30)
    return {
        "connections": connections, "held_after_ramp": held, "ramp_s": round(ramp_s, 1), "requests": requests,
        "success_rate": ok / requests, "valid_p50_ms": float(np.percentile(lat, 50)), "valid_p99_ms": float(np.percentile(lat, 99)),
        "gateway_fds_idle": base_fds, "gateway_fds_peak": max(peak), "fd_soft_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "warm_up_ok": ok0,
    }  # fmt: skip


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=20_000)
    ap.add_argument("--per-process", type=int, default=9_000, help="sockets one attacker process holds")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--zoo", type=Path, default=None, help="a built zoo (default: build into $OLTUNES_HOME)")
    args = ap.parse_args()
    if args.zoo is None:
        from oltunes.config import get_settings
        from oltunes.zoo import build_zoo

        args.zoo = get_settings().home / "zoo"
        build_zoo(args.zoo)
    result = run(args.connections, args.per_process, args.requests, args.zoo)
    print_table("front door under a slowloris flood", list(result), [list(result.values())])
    write_json(args.json, {"front_door": result})


if __name__ == "__main__":
    main()
