"""Serve mode: the Open Inference Protocol (KServe v2 REST) over dynamic batching (`oltunes.worker.batcher`).

Endpoints: ``GET /v2/health/live``, ``GET /v2/health/ready``, ``GET /v2/models/{name}[/versions/1][/ready|/config]``,
``POST /v2/models/{name}[/versions/1]/infer`` (typed tensors, JSON or binary, checked against the model's declared
datatypes and shapes: nothing is cast; `oltunes.gateway.protocol`); the config is Triton's model-config JSON;
``GET /metrics`` (Prometheus text format); ``GET /window[?reset=true]`` (the JSON window the control loop reads;
it restarts after a read with ``reset=true``); ``GET /health`` and ``POST /infer`` ``{"inputs": [item, ...]}``
(the plain JSON form the launchers and the CLI use). Both infer routes are bare ASGI in front of FastAPI
(`oltunes.worker.infer_route`: the hot path, and the only routes that read a body).

Connections: capped, with deadlines for a request's head and body and for keep-alive (`guarded_http`, the
gateway's guard). Limits, all before any inference: a body over ``max_body_bytes`` gets 413 before it is parsed (as soon as its
declared or received size is over); more than ``max_request_items`` items 413; a request whose predicted
queueing delay (from the throughput this worker measured) exceeds ``max_queue_ms`` gets 429 with
``Retry-After`` at once. Errors are ``{"error": ...}`` and never repeat the input. On SIGTERM/SIGINT the server
stops accepting (503), then answers everything queued.
"""

from __future__ import annotations

import math
import signal
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oltunes.errors import DataError, OLTunesError, invalid
from oltunes.gateway.connections import ConnectionLimits
from oltunes.gateway.limits import DEFAULT_MAX_BODY_BYTES
from oltunes.gateway.protocol import ModelMetadata, ProtocolError, TensorMetadata, datatype_of, error_body, triton_config
from oltunes.gateway.server import KEEP_ALIVE_S
from oltunes.gateway.telemetry import ServingMetrics
from oltunes.worker.batcher import DynamicBatcher, Metrics
from oltunes.worker.guarded_http import guarded_protocol
from oltunes.worker.infer_route import InferRoute
from oltunes.worker.session import Device, ModelSession


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Path
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-]{1,128}$", description="served model name (default: the file's stem)")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    max_batch: int = Field(default=32, ge=1, description="items per session call")
    max_delay_ms: float = Field(default=5.0, ge=0, description="longest a request waits for its batch to fill")
    threads: int = Field(default=1, ge=1)
    concurrency: int = Field(default=1, ge=1, description="batches running at once (one session each)")
    device: Device = "auto"
    max_request_items: int = Field(default=4096, ge=1)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    max_queue_ms: float = Field(default=1000.0, gt=0, description="refuse (429) when the predicted queueing delay is over this (the SLO)")

    @property
    def served_name(self) -> str:
        return self.name or self.model.stem


def serve_config(**kwargs: Any) -> ServeConfig:
    try:
        return ServeConfig(**kwargs)
    except ValidationError as e:
        raise invalid(e, "invalid serve settings") from e


class Worker:
    """The serving core behind the routes: admission, preparation, batching, accounting."""

    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg = cfg
        self.sessions = [ModelSession(cfg.model, threads=cfg.threads, device=cfg.device) for _ in range(cfg.concurrency)]
        self.first = self.sessions[0]
        self.window = Metrics()
        self.prom = ServingMetrics("worker")
        self.name = cfg.served_name
        self.meta = self._metadata()
        self.draining = False
        self.batcher: DynamicBatcher | None = None

    def start(self) -> None:
        batch_hist = self.prom.batch_size.labels(self.name)
        self.batcher = DynamicBatcher(self.sessions, self.cfg.max_batch, self.cfg.max_delay_ms, self.window,
                                      on_batch=lambda n, _ms: batch_hist.observe(n))  # fmt: skip
        self.batcher.start()
        self.prom.queue_depth.labels(self.name).set_function(lambda: self.batcher.pending_items if self.batcher else 0)

    def reset_window(self) -> dict[str, Any]:
        snap = self.window.snapshot()
        self.window = Metrics()
        if self.batcher is not None:
            self.batcher.metrics = self.window
        return snap

    def count(self, status: int, seconds: float | None = None) -> None:
        self.window.requests += 1
        if status != 200:
            self.window.errors[status] += 1
        self.prom.requests.labels(self.name, str(status)).inc()
        if seconds is not None:
            self.prom.latency.labels(self.name).observe(seconds)

    def answered(self, seconds: float, items: int) -> None:
        """Book one successful request (both routes): counters, latency histogram and the control loop's window."""
        self.count(200, seconds)
        self.window.request_ms.record(seconds * 1e3)
        self.window.items += items

    def _metadata(self) -> ModelMetadata:
        s = self.first
        dims = [-1 if d is None else d for d in s.input_shape]
        out = s.session.get_outputs()[0]
        out_dims = [-1 if not isinstance(d, int) or d <= 0 else d for d in out.shape]
        out_type = {"tensor(float)": "FP32", "tensor(double)": "FP64", "tensor(int64)": "INT64", "tensor(float16)": "FP16"}.get(out.type, "FP32")
        return ModelMetadata(
            name=self.name,
            inputs=[TensorMetadata(name=s.input_name, datatype=datatype_of(s.input_dtype), shape=dims)],
            outputs=[TensorMetadata(name=s.output_name, datatype=out_type, shape=out_dims)],
        )

    def check_name(self, name: str) -> None:
        if name != self.name:
            raise ProtocolError(404, f"unknown model; this worker serves '{self.name}'")

    def model_config(self) -> dict[str, Any]:
        """Triton's model configuration (JSON) of what this worker serves: the batch axis, the batching and the
        instances as configured."""
        cfg = self.cfg
        return triton_config(self.meta, batched=self.first.fixed_batch is None, max_batch_size=cfg.max_request_items,
                             preferred_batch=cfg.max_batch, max_delay_ms=cfg.max_delay_ms, instances=cfg.concurrency,
                             gpu=self.first.device_kind == "cuda")  # fmt: skip

    async def run(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """Raw outputs of items `x` (any numeric array, items along axis 0) and the batch size they ran in."""
        batcher = self.batcher
        assert batcher is not None, "start() first"
        n = len(x)
        if n == 0:
            raise ProtocolError(400, "the input has no items (its first dimension is 0)")
        if n > self.cfg.max_request_items:
            raise ProtocolError(413, f"{n} items in one request; the limit is {self.cfg.max_request_items}")
        if self.draining:
            raise ProtocolError(503, "server is shutting down; retry on another worker")
        wait_ms = batcher.predicted_wait_ms(n)
        if wait_ms > self.cfg.max_queue_ms:
            retry_s = max(1, math.ceil((wait_ms - self.cfg.max_queue_ms) / 1e3))
            raise ProtocolError(429, f"predicted queueing delay {wait_ms:.0f} ms is over the {self.cfg.max_queue_ms:.0f} ms budget",
                                {"retry-after": str(retry_s)})  # fmt: skip
        try:
            prepared = self.first.prepare(x)
        except DataError as e:
            raise ProtocolError(400, str(e)) from None
        try:
            return await batcher.submit(prepared)
        except OLTunesError as e:
            raise ProtocolError(500, str(e)) from None


def create_app(cfg: ServeConfig) -> Any:
    """The ASGI app for `cfg`: the inference route bare, the rest FastAPI (sessions are loaded here, so a bad model
    fails before binding the port)."""
    from fastapi import FastAPI, Query
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    w = Worker(cfg)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        w.start()
        try:
            yield
        finally:
            w.draining = True
            if w.batcher is not None:
                await w.batcher.close()

    app = FastAPI(title="OLTunes worker", lifespan=lifespan)
    app.state.worker = w  # the server's signal handler reaches the batcher through this

    def failed(e: ProtocolError) -> Response:
        return Response(e.body(), status_code=e.status, headers=e.headers, media_type="application/json")

    @app.exception_handler(ProtocolError)
    async def _protocol(_request: Request, e: ProtocolError) -> Response:
        return failed(e)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        where = "; ".join(f"field {'.'.join(map(str, e['loc']))!r}: {e['msg']}" for e in exc.errors()[:5])
        return Response(error_body(f"invalid request: {where}"), status_code=422, media_type="application/json")

    # -- Open Inference Protocol --------------------------------------------------------------------------
    @app.get("/v2")
    async def server_metadata() -> dict[str, Any]:
        return {"name": "oltunes-worker", "version": "2", "extensions": ["binary_tensor_data"]}

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    def readiness() -> Response:
        if w.draining:
            return failed(ProtocolError(503, "draining: this worker is shutting down"))
        return JSONResponse({"ready": True})

    @app.get("/v2/health/ready")
    async def ready() -> Response:
        return readiness()

    def model(name: str, version: str | None) -> ModelMetadata:
        w.check_name(name)
        w.meta.check_version(version)
        return w.meta

    @app.get("/v2/models/{name}")
    @app.get("/v2/models/{name}/versions/{version}")
    async def model_metadata(name: str, version: str | None = None) -> dict[str, Any]:
        return model(name, version).model_dump()

    @app.get("/v2/models/{name}/ready")
    @app.get("/v2/models/{name}/versions/{version}/ready")
    async def model_ready(name: str, version: str | None = None) -> Response:
        model(name, version)
        return readiness()

    @app.get("/v2/models/{name}/config")
    @app.get("/v2/models/{name}/versions/{version}/config")
    async def model_config(name: str, version: str | None = None) -> dict[str, Any]:
        model(name, version)
        return w.model_config()

    # -- operations (plain `POST /infer` is bare ASGI: `oltunes.worker.infer_route`) -----------------------------
    @app.get("/health")
    async def health() -> dict[str, Any]:
        s = w.first
        return {"status": "draining" if w.draining else "ok", "model": str(cfg.model), "name": w.name,
                "provider": s.provider, "device": s.device_kind, "input_name": s.input_name,
                "input_shape": list(s.input_shape), "input_dtype": str(s.input_dtype)}  # fmt: skip

    @app.get("/metrics")
    async def prometheus() -> Response:
        body, content_type = w.prom.exposition()
        return Response(body, media_type=content_type)

    @app.get("/window")
    async def window(reset: bool = Query(False, description="start a new window after this read")) -> dict[str, Any]:
        b = w.batcher
        assert b is not None
        snap = w.reset_window() if reset else w.window.snapshot()
        snap.update(
            queue_depth=b.pending_items, queue_requests=len(b.pending), in_flight_batches=b.in_flight,
            measured_items_per_s=None if b.items_per_s is None else round(b.items_per_s * b.lanes, 3),
            model=str(cfg.model), name=w.name, provider=w.first.provider, device=w.first.device_kind,
            threads=cfg.threads, concurrency=cfg.concurrency, max_batch=cfg.max_batch, max_delay_ms=cfg.max_delay_ms,
            max_queue_ms=cfg.max_queue_ms,
        )  # fmt: skip
        return snap

    return InferRoute(app, w, cfg.max_body_bytes)  # inference bypasses the framework (`oltunes.worker.infer_route`)


def serve(cfg: ServeConfig) -> None:
    """Run the server in the foreground until SIGINT/SIGTERM (queued requests are answered first)."""
    import uvicorn

    app = create_app(cfg)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # On the signal, flush the queue at once: waiting requests must not sit out their queue delay while
            # uvicorn waits for them to finish. New requests get 503 from here on.
            w: Worker = app.state.worker
            w.draining = True
            if w.batcher is not None:
                w.batcher.drain_soon()
            super().handle_exit(sig, frame)

    # uvicorn drains, then re-raises the captured signal with the previous handler: make that a clean exit
    # (0 for SIGTERM, 130 for Ctrl-C) instead of death-by-signal or a KeyboardInterrupt traceback.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    config = uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False, timeout_graceful_shutdown=30,
        timeout_keep_alive=KEEP_ALIVE_S,  # longer than the gateway keeps idle connections: no reuse race
        http=guarded_protocol(ConnectionLimits(idle_timeout_s=KEEP_ALIVE_S)),  # connection cap, read deadlines
    )
    _Server(config).run()
