"""Streaming traffic: real arrival traces replayed by a bounded load generator, an ordinary client of a gateway.

The generator speaks only the Open Inference Protocol (``POST /v2/models/{model}/infer``) to one address: the
service's gateway, which hides switches and crashes behind it. Accounting invariant (checked by the tests):
every request the generator creates ends in exactly one of ``ok`` (answered), ``failed`` (an error answer or
no answer, counted by reason: ``429`` is a refusal by admission control) or ``shed`` (never sent: the in-flight
bound was hit); ``sent == ok + failed + in_flight`` at any time. Latencies go into HDR histograms (bounded
memory, exact merging), not lists.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

import aiohttp
import numpy as np
import pandas as pd

from oltunes.errors import ConfigError, DataError
from oltunes.gateway.app import CLIENT_KEEP_ALIVE_S
from oltunes.registry import Registered
from oltunes.worker.stats import LatencyHistogram

BUNDLED_TRACE = Path(__file__).resolve().parent.parent / "data" / "traces" / "azure_code_head.csv"


# -- traces ----------------------------------------------------------------------------------------------
class TraceFormat(Registered, root=True):
    """A file format of request arrivals; `read` returns arrival offsets in seconds, sorted, starting at 0."""

    def matches(self, first_line: str) -> bool:
        raise NotImplementedError

    def read(self, path: Path) -> np.ndarray:
        raise NotImplementedError


class ProteusTrace(TraceFormat, name="proteus"):
    """``proteus/twitter/<scenario>/<family>.csv.gz``: no header, ``arrival_ms,count,slo_ms``."""

    def matches(self, first_line: str) -> bool:
        parts = first_line.strip().split(",")
        return len(parts) == 3 and all(p.replace(".", "", 1).isdigit() for p in parts)

    def read(self, path: Path) -> np.ndarray:
        df = pd.read_csv(path, header=None, names=["arrival_ms", "count", "slo_ms"])
        reps = df["count"].clip(lower=1).astype(int).to_numpy()
        return np.repeat(df["arrival_ms"].to_numpy(dtype=float) / 1000.0, reps)


class AzureTrace(TraceFormat, name="azure"):
    """Azure LLM inference trace: header ``TIMESTAMP,ContextTokens,GeneratedTokens``."""

    def matches(self, first_line: str) -> bool:
        return first_line.startswith("TIMESTAMP")

    def read(self, path: Path) -> np.ndarray:
        ts = pd.to_datetime(pd.read_csv(path, usecols=["TIMESTAMP"])["TIMESTAMP"])
        return (ts - ts.min()).dt.total_seconds().to_numpy()


def _first_line(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return f.readline()


def load_arrivals(
    path: Path | str, *, fmt: str | None = None, speedup: float = 1.0, duration_s: float | None = None
) -> np.ndarray:
    """Arrival offsets (s) of a real trace replayed `speedup` times faster, looped to fill `duration_s`.

    The format is detected from the first line unless `fmt` names one (``proteus``, ``azure``).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"trace {path} does not exist")
    if speedup <= 0:
        raise ConfigError(f"speedup must be > 0, got {speedup}")
    if fmt is not None:
        reader = TraceFormat.make(fmt)
    else:
        line = _first_line(path)
        reader = next((r for r in map(TraceFormat.make, TraceFormat.known()) if r.matches(line)), None)
        if reader is None:
            raise DataError(f"trace {path}: unknown format (first line {line.strip()!r}); known: {', '.join(TraceFormat.known())}")
    t = np.sort(reader.read(path))
    if t.size == 0:
        raise DataError(f"trace {path} has no requests")
    t = (t - t[0]) / speedup
    if duration_s is None:
        return t
    period = t[-1] + (t[-1] / max(t.size - 1, 1))  # one mean gap after the last arrival before looping
    reps = int(np.ceil(duration_s / period)) if period > 0 else 1
    looped = np.concatenate([t + k * period for k in range(max(reps, 1))])
    return looped[looped < duration_s]


# -- load generation -------------------------------------------------------------------------------------
@dataclass
class Window:
    """Client-side view of one control interval."""

    seconds: float
    offered: int  # requests that arrived in the interval (sent + shed)
    ok: int
    failed: int
    shed: int
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)

    def percentile(self, q: float) -> float | None:
        return self.latency.percentile(q)


class LoadGenerator:
    """Replay arrivals against one model of a gateway (or of a worker: both speak the same protocol).

    Parameters
    ----------
    url
        ``http://host:port`` of the gateway.
    model
        Model name in the request path.
    arrivals
        Offsets in seconds (`load_arrivals`).
    payload
        ``payload(i) -> bytes``: the JSON body of request `i` (`oip_payloads`: real model inputs).
    max_in_flight
        The bound: an arrival finding this many requests outstanding is shed (counted, never sent).
    request_timeout_s
        Per request (the gateway's retry window is inside it).
    token
        Bearer token for a gateway that needs one.
    """

    def __init__(
        self,
        url: str,
        model: str,
        arrivals: np.ndarray,
        payload: Callable[[int], bytes],
        *,
        max_in_flight: int = 256,
        request_timeout_s: float = 60.0,
        token: str | None = None,
    ):
        self.url = f"{url.rstrip('/')}/v2/models/{model}/infer"
        self.arrivals = arrivals
        self.payload = payload
        self.max_in_flight = max_in_flight
        self.request_timeout_s = request_timeout_s
        self.headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
        self.sent = self.ok = self.failed = self.shed = 0
        self.failures: Counter = Counter()
        self._pending: set[asyncio.Task] = set()
        self._win_start = time.monotonic()
        self._win = {"offered": 0, "ok": 0, "failed": 0, "shed": 0}
        self._win_lat = LatencyHistogram()
        self.latency = LatencyHistogram()  # every answered request of the session
        self.finished = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def window(self) -> Window:
        """Client statistics since the previous call (the control loop calls this once per interval)."""
        now = time.monotonic()
        w = Window(now - self._win_start, self._win["offered"], self._win["ok"], self._win["failed"], self._win["shed"], self._win_lat)
        self._win_start, self._win, self._win_lat = now, {k: 0 for k in self._win}, LatencyHistogram()
        return w

    def latency_summary(self) -> dict[str, float]:
        """Client-side request latency over the whole session (HTTP and gateway included)."""
        if not self.latency.count:
            return {}
        return {f"p{q}_ms": float(self.latency.percentile(q)) for q in (50, 95, 99)}  # type: ignore[arg-type]

    def totals(self) -> dict[str, int]:
        return {"sent": self.sent, "ok": self.ok, "failed": self.failed, "shed": self.shed, "in_flight": self.in_flight,
                "refused": self.failures["429"]}  # of `failed`: admission control's answers  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Issue every arrival at its time until the trace ends or `stop` is set; then wait for in-flight ones."""
        connector = aiohttp.TCPConnector(limit=self.max_in_flight, keepalive_timeout=CLIENT_KEEP_ALIVE_S)  # < the server's
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            t0 = time.monotonic()
            self._win_start = t0
            try:
                for i, at in enumerate(self.arrivals):
                    delay = t0 + float(at) - time.monotonic()
                    if delay > 0:
                        try:
                            await asyncio.wait_for(stop.wait(), timeout=delay)
                        except TimeoutError:
                            pass
                    if stop.is_set():
                        break
                    self._win["offered"] += 1
                    if self.in_flight >= self.max_in_flight:
                        self.shed += 1
                        self._win["shed"] += 1
                        continue
                    self.sent += 1
                    task = asyncio.create_task(self._send(client, i))
                    self._pending.add(task)
                    task.add_done_callback(self._pending.discard)
            finally:
                if self._pending:
                    await asyncio.wait(set(self._pending), timeout=self.request_timeout_s)
                for task in list(self._pending):  # still unanswered: cancelled and reported failed
                    task.cancel()
                if self._pending:
                    await asyncio.gather(*self._pending, return_exceptions=True)
                self.finished.set()

    def _fail(self, reason: str) -> None:
        self.failed += 1
        self._win["failed"] += 1
        self.failures[reason] += 1

    async def _send(self, client: aiohttp.ClientSession, i: int) -> None:
        t0 = time.perf_counter()
        try:
            try:
                async with client.post(self.url, data=self.payload(i), headers=self.headers) as r:
                    await r.read()
                    status: int | str = r.status
            except TimeoutError:
                status = "timeout"
            except aiohttp.ClientError:
                status = "connection"
            if status != 200:
                self._fail(str(status))
                return
            ms = (time.perf_counter() - t0) * 1e3
            self.ok += 1
            self._win["ok"] += 1
            self._win_lat.record(ms)
            self.latency.record(ms)
        except asyncio.CancelledError:
            self._fail("cancelled at shutdown")
            raise


def oip_payloads(x: np.ndarray, metadata: dict[str, Any]) -> Callable[[int], bytes]:
    """Open Inference Protocol request bodies (JSON), one real item each, cycling over `x`.

    `metadata` is the model's ``GET /v2/models/{name}`` answer: it gives the input's name and datatype.
    """
    meta = metadata["inputs"][0]
    shape = [1, *(d if d > 0 else -1 for d in meta["shape"][1:])]
    items = [x.reshape(x.shape[0], -1)[k] for k in range(x.shape[0])]
    if -1 in shape:  # variable item dims: take the item's own shape
        shape = [1, *x.shape[1:]]
    head = f'{{"inputs": [{{"name": {json.dumps(meta["name"])}, "datatype": "{meta["datatype"]}", "shape": {json.dumps(shape)}, "data": '
    bodies = [head + json.dumps(row.tolist()) for row in items]

    def payload(i: int) -> bytes:
        return f'{bodies[i % len(bodies)]}}}], "id": "{i}"}}'.encode()

    return payload
