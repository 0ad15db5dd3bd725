"""Dynamic batching for serve mode, the worker's metrics window, and its admission estimate.

Requests are queued; a collector takes queued requests into one batch until it holds ``max_batch`` items or
the oldest request has waited ``max_delay_ms``, runs one session call for the batch on a free lane
(``concurrency`` sessions) and hands every request its slice of the raw output. While all lanes are busy,
requests keep queueing, so batches grow with load. `predicted_wait_ms` is what admission control asks: how
long a request of `n` items would queue, from the throughput the worker has measured on its own batches.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oltunes.worker.session import ModelSession, SessionPool
from oltunes.worker.stats import LatencyHistogram

RATE_SMOOTHING = 0.2  # EWMA weight of the newest batch in the measured items/s


@dataclass
class _Pending:
    x: np.ndarray
    future: asyncio.Future
    enqueued: float


@dataclass
class Metrics:
    """Counters and latency histograms of the current window (all updates happen on the event loop thread)."""

    started: float = field(default_factory=time.perf_counter)
    cpu_started: float = field(default_factory=time.process_time)
    requests: int = 0
    items: int = 0
    errors: Counter = field(default_factory=Counter)
    request_ms: LatencyHistogram = field(default_factory=LatencyHistogram)
    batch_ms: LatencyHistogram = field(default_factory=LatencyHistogram)
    batch_sizes: Counter = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        window = max(time.perf_counter() - self.started, 1e-9)
        batches = sum(self.batch_sizes.values())
        batch = self.batch_ms.summary("batch_latency")
        return {
            "window_s": round(window, 6),
            "requests": self.requests,
            "items": self.items,
            "errors": sum(self.errors.values()),
            "errors_by_status": {str(k): v for k, v in sorted(self.errors.items())},
            "throughput_items_per_s": round(self.items / window, 3),
            "throughput_requests_per_s": round(self.requests / window, 3),
            **self.request_ms.summary("request_latency"),
            **batch,
            # Same keys as a batch-mode record: latency of one session call (one batch).
            **{k.replace("batch_latency", "latency"): v for k, v in batch.items()},
            "request_latency_hdr": self.request_ms.encode(),  # exact merging across windows/workers
            "batches": batches,
            "batch_size_mean": round(sum(k * v for k, v in self.batch_sizes.items()) / batches, 4) if batches else None,
            "batch_size_histogram": {str(k): v for k, v in sorted(self.batch_sizes.items())},
            "cpu_time_s": round(time.process_time() - self.cpu_started, 6),
        }


class DynamicBatcher:
    """Collects queued requests into batches and runs them on `sessions` (one lane per session).

    `on_batch(items, ms)` is called on the event loop after every session call (Prometheus metrics).
    """

    def __init__(self, sessions: list[ModelSession], max_batch: int, max_delay_ms: float, metrics: Metrics, on_batch: Any = None) -> None:
        self.max_batch = max_batch
        self.max_delay = max_delay_ms / 1e3
        self.metrics = metrics
        self.on_batch = on_batch
        self.lanes = len(sessions)
        self.pending: deque[_Pending] = deque()
        self.pending_items = 0
        self.running_items = 0
        self.in_flight = 0
        self.items_per_s: float | None = None  # one lane's measured rate; None until the first batch
        self._arrived = asyncio.Event()
        self._lanes = asyncio.Semaphore(len(sessions))
        self._pool = SessionPool(sessions)
        self._executor = ThreadPoolExecutor(len(sessions), thread_name_prefix="oltunes-infer")
        self._closing = False
        self._flush = False  # draining: dispatch at once instead of waiting for the queue delay
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._collector: asyncio.Task | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._collector = self._loop.create_task(self._collect())

    def predicted_wait_ms(self, items: int) -> float:
        """How long `items` more would wait before their batch finishes, at the measured rate (0 before any)."""
        if not self.items_per_s:
            return 0.0
        ahead = self.pending_items + self.running_items + items
        return ahead / (self.items_per_s * self.lanes) * 1e3

    def drain_soon(self) -> None:
        """Thread/signal-safe: stop waiting for batches to fill, so queued requests are answered now."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._flush = True
        self._arrived.set()

    async def submit(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """Queue prepared items `x`; returns their raw outputs and the size of the batch they ran in."""
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(_Pending(x, fut, time.perf_counter()))
        self.pending_items += len(x)
        self._arrived.set()
        return await fut

    def _take(self) -> list[_Pending]:
        batch = [self.pending.popleft()]
        items = len(batch[0].x)
        while self.pending and items + len(self.pending[0].x) <= self.max_batch:
            items += len(self.pending[0].x)
            batch.append(self.pending.popleft())
        self.pending_items -= items
        return batch

    async def _collect(self) -> None:
        while True:
            await self._lanes.acquire()  # wait for a free lane first: queued requests meanwhile make bigger batches
            while True:
                if not self.pending:
                    if self._closing:
                        self._lanes.release()
                        return
                    self._arrived.clear()
                    await self._arrived.wait()
                    continue
                wait = self.pending[0].enqueued + self.max_delay - time.perf_counter()
                if self.pending_items >= self.max_batch or wait <= 0 or self._closing or self._flush:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), wait)
                except TimeoutError:
                    pass
            task = asyncio.get_running_loop().create_task(self._run(self._take()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[_Pending]) -> None:
        self.in_flight += 1
        x = batch[0].x if len(batch) == 1 else np.concatenate([p.x for p in batch])
        self.running_items += len(x)
        try:
            try:
                out, ms = await asyncio.get_running_loop().run_in_executor(self._executor, self._pool.run, x)
            except Exception as e:  # a model failure fails this batch's requests, not the server
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(e)
                return
            rate = len(x) / max(ms / 1e3, 1e-6)
            self.items_per_s = rate if self.items_per_s is None else (1 - RATE_SMOOTHING) * self.items_per_s + RATE_SMOOTHING * rate
            self.metrics.batch_ms.record(ms)
            self.metrics.batch_sizes[len(x)] += 1
            if self.on_batch is not None:
                self.on_batch(len(x), ms)
            start = 0
            for p in batch:
                if not p.future.done():  # the client may have gone away
                    p.future.set_result((out[start : start + len(p.x)], len(x)))
                start += len(p.x)
        finally:
            self.running_items -= len(x)
            self.in_flight -= 1
            self._lanes.release()

    async def close(self) -> None:
        """Answer everything queued, then stop."""
        self._closing = True
        self._arrived.set()
        if self._collector is not None:
            await self._collector
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=True)
