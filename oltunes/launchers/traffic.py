"""Streaming traffic: real arrival traces, a router that can switch workers, and a bounded load generator.

Accounting invariant (checked by the tests): every request the generator creates ends in exactly one of
``ok`` (answered), ``failed`` (reported, with the reason) or ``shed`` (never sent: the in-flight bound was hit);
``sent == ok + failed + in_flight`` at any time. A request whose worker died or began draining is re-sent to
the current worker until its retry window closes (inference is idempotent), then reported failed.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from oltunes.errors import ConfigError, DataError
from oltunes.registry import Registered

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


# -- routing ---------------------------------------------------------------------------------------------
@dataclass
class Router:
    """Where new requests go, and how many are in flight at each worker (so an old one can be drained)."""

    current: str | None = None
    in_flight: Counter = field(default_factory=Counter)

    def switch(self, url: str) -> None:
        self.current = url

    async def drained(self, url: str, timeout_s: float) -> bool:
        """Wait until no request is in flight at `url`; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight[url] > 0:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True


# -- load generation -------------------------------------------------------------------------------------
@dataclass
class Window:
    """Client-side view of one control interval."""

    seconds: float
    offered: int  # requests that arrived in the interval (sent + shed)
    ok: int
    failed: int
    shed: int
    latencies_ms: list[float]

    def percentile(self, q: float) -> float | None:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else None


class LoadGenerator:
    """Replay arrivals against the router's current worker.

    Parameters
    ----------
    router
        Gives the current worker URL for each (re-)send.
    arrivals
        Offsets in seconds (`load_arrivals`).
    payload
        ``payload(i) -> bytes``: the JSON body of request `i` (real model inputs).
    max_in_flight
        The bound: an arrival finding this many requests outstanding is shed (counted, never sent).
    request_timeout_s
        Per attempt.
    retry_window_s
        How long a request keeps being re-sent after connection failures or 503 (worker crashed/draining).
    """

    def __init__(
        self,
        router: Router,
        arrivals: np.ndarray,
        payload: Callable[[int], bytes],
        *,
        max_in_flight: int = 256,
        request_timeout_s: float = 10.0,
        retry_window_s: float = 30.0,
    ):
        self.router = router
        self.arrivals = arrivals
        self.payload = payload
        self.max_in_flight = max_in_flight
        self.request_timeout_s = request_timeout_s
        self.retry_window_s = retry_window_s
        self.sent = self.ok = self.failed = self.shed = self.retries = 0
        self.failures: Counter = Counter()
        self._pending: set[asyncio.Task] = set()
        self._win_start = time.monotonic()
        self._win = {"offered": 0, "ok": 0, "failed": 0, "shed": 0}
        self._win_lat: list[float] = []
        self.latencies_ms: list[float] = []  # every answered request, for the session's summary
        self.finished = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def window(self) -> Window:
        """Client statistics since the previous call (the control loop calls this once per interval)."""
        now = time.monotonic()
        w = Window(now - self._win_start, self._win["offered"], self._win["ok"], self._win["failed"], self._win["shed"], self._win_lat)
        self._win_start, self._win, self._win_lat = now, {k: 0 for k in self._win}, []
        return w

    def latency_summary(self) -> dict[str, float]:
        """Client-side request latency over the whole session (HTTP included)."""
        if not self.latencies_ms:
            return {}
        p50, p95, p99 = np.percentile(self.latencies_ms, [50, 95, 99])
        return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99)}

    def totals(self) -> dict[str, int]:
        return {"sent": self.sent, "ok": self.ok, "failed": self.failed, "shed": self.shed,
                "in_flight": self.in_flight, "retries": self.retries}  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Issue every arrival at its time until the trace ends or `stop` is set; then wait for in-flight ones."""
        limits = httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=min(self.max_in_flight, 64))
        async with httpx.AsyncClient(timeout=self.request_timeout_s, limits=limits) as client:
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
                    await asyncio.wait(set(self._pending), timeout=self.retry_window_s + self.request_timeout_s)
                for task in list(self._pending):  # still unanswered: cancelled and reported failed
                    task.cancel()
                if self._pending:
                    await asyncio.gather(*self._pending, return_exceptions=True)
                self.finished.set()

    def _fail(self, reason: str) -> None:
        self.failed += 1
        self._win["failed"] += 1
        self.failures[reason] += 1

    async def _send(self, client: httpx.AsyncClient, i: int) -> None:
        body = self.payload(i)
        deadline = time.monotonic() + self.retry_window_s
        t0 = time.perf_counter()
        attempt = 0
        try:
            while True:
                url = self.router.current
                if url is None:
                    await asyncio.sleep(0.02)
                    if time.monotonic() > deadline:
                        self._fail("no worker")
                        return
                    continue
                self.router.in_flight[url] += 1
                try:
                    r = await client.post(f"{url}/infer", content=body, headers={"content-type": "application/json"})
                    status: int | str = r.status_code
                except httpx.TimeoutException:
                    status = "timeout"
                except httpx.TransportError:
                    status = "connection"  # the worker died or is restarting
                finally:
                    self.router.in_flight[url] -= 1
                if status == 200:
                    ms = (time.perf_counter() - t0) * 1e3
                    self.ok += 1
                    self._win["ok"] += 1
                    self._win_lat.append(ms)
                    self.latencies_ms.append(ms)
                    return
                retryable = status in ("connection", 502, 503)
                if not retryable or time.monotonic() > deadline:
                    self._fail(str(status))
                    return
                attempt += 1
                self.retries += 1
                await asyncio.sleep(min(0.05 * attempt, 0.5))
        except asyncio.CancelledError:
            self._fail("cancelled at shutdown")
            raise


def json_payloads(x: np.ndarray) -> Callable[[int], bytes]:
    """Request bodies cycling over real items: ``{"inputs": [item], "ids": [i]}``."""
    items = [json.dumps(row.tolist()) for row in x.reshape(x.shape[0], -1)]

    def payload(i: int) -> bytes:
        return f'{{"inputs": [{items[i % len(items)]}], "ids": [{i}]}}'.encode()

    return payload
