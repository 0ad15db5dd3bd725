"""Serve mode: HTTP inference with dynamic batching.

Requests are queued; a collector takes queued requests into one batch until it holds ``max_batch`` items or
the oldest request has waited ``max_delay_ms``, runs one session call for the batch on a free lane
(``concurrency`` sessions, each with ``threads`` intra-op threads) and hands every request its slice of the
result. While all lanes are busy, requests keep queueing, so batches grow with load.

Endpoints: ``POST /infer`` ``{"inputs": [item, ...], "ids": [...]?}`` -> ``{"predictions": [...], ...}``;
``GET /health``; ``GET /metrics[?reset=true]`` (the window restarts after a read with ``reset=true``).
A request larger than ``max_batch`` runs as one batch of its own; one larger than ``max_request_items`` is
refused with 413. On shutdown (SIGTERM/SIGINT) the server stops accepting, then answers everything queued.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oltunes.errors import DataError, OLTunesError, invalid
from oltunes.worker.session import Device, ModelSession, SessionPool
from oltunes.worker.stats import latency_summary

WINDOW_SAMPLES = 100_000  # latency samples kept per metrics window (oldest dropped beyond this)


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Path
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    max_batch: int = Field(default=32, ge=1, description="items per session call")
    max_delay_ms: float = Field(default=5.0, ge=0, description="longest a request waits for its batch to fill")
    threads: int = Field(default=1, ge=1)
    concurrency: int = Field(default=1, ge=1, description="batches running at once (one session each)")
    device: Device = "auto"
    max_request_items: int = Field(default=4096, ge=1)
    max_queue_items: int = Field(default=100_000, ge=1, description="beyond this, requests get 503 (back-pressure)")


def serve_config(**kwargs: Any) -> ServeConfig:
    try:
        return ServeConfig(**kwargs)
    except ValidationError as e:
        raise invalid(e, "invalid serve settings") from e


class InferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inputs: list[Any] = Field(min_length=1, description="items; each any nesting of numbers matching the model input")
    ids: list[int | str] | None = None


class InferResponse(BaseModel):
    predictions: list[float | int]
    ids: list[int | str] | None = None
    model: str
    batch_items: int = Field(description="items in the session call this request rode in")
    latency_ms: float


@dataclass
class _Pending:
    x: np.ndarray
    future: asyncio.Future
    enqueued: float


@dataclass
class Metrics:
    """Counters and latency samples of the current window (all updates happen on the event loop thread)."""

    started: float = field(default_factory=time.perf_counter)
    cpu_started: float = field(default_factory=time.process_time)
    requests: int = 0
    items: int = 0
    errors: Counter = field(default_factory=Counter)
    request_ms: deque = field(default_factory=lambda: deque(maxlen=WINDOW_SAMPLES))
    batch_ms: deque = field(default_factory=lambda: deque(maxlen=WINDOW_SAMPLES))
    batch_sizes: Counter = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        window = max(time.perf_counter() - self.started, 1e-9)
        batches = sum(self.batch_sizes.values())
        batch = latency_summary(self.batch_ms, "batch_latency")
        return {
            "window_s": round(window, 6),
            "requests": self.requests,
            "items": self.items,
            "errors": sum(self.errors.values()),
            "errors_by_status": {str(k): v for k, v in sorted(self.errors.items())},
            "throughput_items_per_s": round(self.items / window, 3),
            "throughput_requests_per_s": round(self.requests / window, 3),
            **latency_summary(self.request_ms, "request_latency"),
            **batch,
            # Same keys as a batch-mode record: latency of one session call (one batch).
            **{k.replace("batch_latency", "latency"): v for k, v in batch.items()},
            "batches": batches,
            "batch_size_mean": round(sum(k * v for k, v in self.batch_sizes.items()) / batches, 4) if batches else None,
            "batch_size_histogram": {str(k): v for k, v in sorted(self.batch_sizes.items())},
            "cpu_time_s": round(time.process_time() - self.cpu_started, 6),
        }


class DynamicBatcher:
    """Collects queued requests into batches and runs them on `sessions` (one lane per session)."""

    def __init__(self, sessions: list[ModelSession], max_batch: int, max_delay_ms: float, metrics: Metrics) -> None:
        self.max_batch = max_batch
        self.max_delay = max_delay_ms / 1e3
        self.metrics = metrics
        self.pending: deque[_Pending] = deque()
        self.pending_items = 0
        self.in_flight = 0
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

    def drain_soon(self) -> None:
        """Thread/signal-safe: stop waiting for batches to fill, so queued requests are answered now."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._flush = True
        self._arrived.set()

    async def submit(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """Queue prepared items `x`; returns their predictions and the size of the batch they ran in."""
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
        try:
            x = batch[0].x if len(batch) == 1 else np.concatenate([p.x for p in batch])
            try:
                preds, ms = await asyncio.get_running_loop().run_in_executor(self._executor, self._pool.predict, x)
            except Exception as e:  # a model failure fails this batch's requests, not the server
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(e)
                return
            self.metrics.batch_ms.append(ms)
            self.metrics.batch_sizes[len(x)] += 1
            start = 0
            for p in batch:
                if not p.future.done():  # the client may have gone away
                    p.future.set_result((preds[start : start + len(p.x)], len(x)))
                start += len(p.x)
        finally:
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


def create_app(cfg: ServeConfig) -> Any:
    """The FastAPI app for `cfg` (sessions are loaded here, so a bad model fails before binding the port)."""
    from fastapi import FastAPI, HTTPException, Query, Request
    from fastapi.exception_handlers import request_validation_exception_handler
    from fastapi.exceptions import RequestValidationError

    sessions = [ModelSession(cfg.model, threads=cfg.threads, device=cfg.device) for _ in range(cfg.concurrency)]
    first = sessions[0]
    state: dict[str, Any] = {"metrics": Metrics(), "draining": False}

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher = DynamicBatcher(sessions, cfg.max_batch, cfg.max_delay_ms, state["metrics"])
        batcher.start()
        state["batcher"] = batcher
        try:
            yield
        finally:
            state["draining"] = True
            await batcher.close()

    app = FastAPI(title="OLTunes worker", lifespan=lifespan)
    app.state.oltunes = state  # the server's signal handler reaches the batcher through this

    def fail(status: int, reason: str) -> HTTPException:
        state["metrics"].errors[status] += 1
        return HTTPException(status_code=status, detail=reason)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        if request.url.path == "/infer":
            state["metrics"].requests += 1
            state["metrics"].errors[422] += 1
        return await request_validation_exception_handler(request, exc)

    @app.post("/infer", response_model=InferResponse)
    async def infer(req: InferRequest) -> InferResponse:
        t0 = time.perf_counter()
        metrics: Metrics = state["metrics"]
        batcher: DynamicBatcher = state["batcher"]
        metrics.requests += 1
        if len(req.inputs) > cfg.max_request_items:
            raise fail(413, f"{len(req.inputs)} items in one request; the limit is {cfg.max_request_items}")
        if req.ids is not None and len(req.ids) != len(req.inputs):
            raise fail(400, f"'ids' has {len(req.ids)} entries but 'inputs' has {len(req.inputs)}")
        if state["draining"]:
            raise fail(503, "server is shutting down")
        if batcher.pending_items + len(req.inputs) > cfg.max_queue_items:
            raise fail(503, f"queue full ({batcher.pending_items} items waiting); retry later")
        try:
            x = np.asarray(req.inputs, dtype=first.input_dtype)
        except (ValueError, TypeError) as e:
            raise fail(400, f"'inputs' must be a list of equally shaped numeric items: {e}") from None
        try:
            x = first.prepare(x)
        except DataError as e:
            raise fail(400, str(e)) from None
        try:
            preds, batch_items = await batcher.submit(x)
        except OLTunesError as e:
            raise fail(500, str(e)) from None
        ms = (time.perf_counter() - t0) * 1e3
        metrics = state["metrics"]  # the window may have been reset while this request waited
        metrics.request_ms.append(ms)
        metrics.items += len(x)
        return InferResponse(
            predictions=preds.tolist(),
            ids=req.ids,
            model=cfg.model.name,
            batch_items=batch_items,
            latency_ms=round(ms, 4),
        )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "draining" if state["draining"] else "ok",
            "model": str(cfg.model),
            "provider": first.provider,
            "device": first.device_kind,
            "input_name": first.input_name,
            "input_shape": list(first.input_shape),
            "input_dtype": str(first.input_dtype),
        }

    @app.get("/metrics")
    async def metrics(reset: bool = Query(False, description="start a new window after this read")) -> dict[str, Any]:
        batcher: DynamicBatcher = state["batcher"]
        snap = state["metrics"].snapshot()
        snap.update(
            queue_depth=batcher.pending_items,
            queue_requests=len(batcher.pending),
            in_flight_batches=batcher.in_flight,
            model=str(cfg.model),
            provider=first.provider,
            device=first.device_kind,
            threads=cfg.threads,
            concurrency=cfg.concurrency,
            max_batch=cfg.max_batch,
            max_delay_ms=cfg.max_delay_ms,
        )
        if reset:
            state["metrics"] = batcher.metrics = Metrics()
        return snap

    return app


def serve(cfg: ServeConfig) -> None:
    """Run the server in the foreground until SIGINT/SIGTERM (queued requests are answered first)."""
    import uvicorn

    app = create_app(cfg)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # On the signal, flush the queue at once: waiting requests must not sit out their queue delay while
            # uvicorn waits for them to finish. New requests get 503 from here on.
            app.state.oltunes["draining"] = True
            batcher = app.state.oltunes.get("batcher")
            if batcher is not None:
                batcher.drain_soon()
            super().handle_exit(sig, frame)

    # uvicorn drains, then re-raises the captured signal with the previous handler: make that a clean exit
    # (0 for SIGTERM, 130 for Ctrl-C) instead of death-by-signal or a KeyboardInterrupt traceback.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    config = uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False, timeout_graceful_shutdown=30
    )
    _Server(config).run()
