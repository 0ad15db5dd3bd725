"""The gateway: one stable Open Inference Protocol endpoint in front of every model's current worker.

A plain ASGI app (no framework: it only routes by path and forwards bytes, so it adds little latency). Per
request: token check (when a token is set; health probes stay open), body-size limit before anything is read past
it (413), route by the model name in the path (404 in the protocol's shape for an unknown model), then forward the
bytes to the route's current worker, unless the model's predicted wait is already over its SLO (429 with
``Retry-After`` at once; `Route.predicted_wait_ms`). An attempt that finds the worker gone (connection refused or reset: it died
or is restarting) or draining (502/503) is re-sent to whatever worker the route points at then, until
``retry_window_s`` has passed; only then is it answered 503 and counted in ``failures``. Inference is idempotent,
so a retried request is answered once. The worker's own answers, 429 with ``Retry-After`` included, pass through.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from oltunes.gateway.limits import DEFAULT_MAX_BODY_BYTES, read_limited
from oltunes.gateway.protocol import HEADER_LENGTH, ProtocolError, error_body
from oltunes.gateway.routing import Route, SwitchReason
from oltunes.gateway.telemetry import ServingMetrics

CLIENT_KEEP_ALIVE_S = 15  # idle upstream connections are closed by us first (servers keep them for 75 s)

MODEL_PATH = re.compile(r"^/v2/models/([^/]{1,128})(/versions/[^/]{1,32})?(/ready|/infer)?$")
RETRYABLE = {502, 503}
FORWARD_REQUEST = ("content-type", HEADER_LENGTH)
FORWARD_RESPONSE = (b"content-type", b"inference-header-content-length", b"retry-after")
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Gateway:
    """Routes by model name; `add` a route per model, then let each model's supervisor `switch` it.

    Parameters
    ----------
    token
        Bearer token required on every path but the health probes (None: no auth; `serve_gateway` refuses that
        off loopback).
    max_body_bytes
        Larger bodies get 413 before they are read.
    retry_window_s, attempt_timeout_s
        How long a request keeps being re-sent across switches and crashes; the limit of one attempt.
    """

    def __init__(self, *, token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 retry_window_s: float = 30.0, attempt_timeout_s: float = 60.0) -> None:  # fmt: skip
        self.routes: dict[str, Route] = {}
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.retry_window_s = retry_window_s
        self.attempt_timeout_s = attempt_timeout_s
        self.prom = ServingMetrics("gateway")
        self.failures: Counter = Counter()  # requests given up on after the retry window, by reason
        self._session: aiohttp.ClientSession | None = None

    # -- routes -------------------------------------------------------------------------------------------
    def add(self, name: str, slo_ms: float | None = None) -> Route:
        if name in self.routes:
            raise ValueError(f"model {name!r} is already routed")
        route = Route(name=name, slo_ms=slo_ms, on_switch=self._switched)
        self.routes[name] = route
        self.prom.queue_depth.labels(name).set_function(lambda: route.outstanding)
        return route

    def _switched(self, name: str, reason: SwitchReason) -> None:
        if reason == "switch":
            self.prom.switches.labels(name).inc()
        elif reason == "restart":
            self.prom.restarts.labels(name).inc()

    # -- ASGI ---------------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            await self._http(scope, receive, send)
        except ProtocolError as e:
            await respond(send, e.status, e.body(), headers=[(k.encode(), v.encode()) for k, v in e.headers.items()])

    async def _lifespan(self, receive: Callable, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await self.open()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def open(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=CLIENT_KEEP_ALIVE_S)  # < the worker's keep-alive
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                  timeout=aiohttp.ClientTimeout(total=self.attempt_timeout_s))  # fmt: skip

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        if self.token is None:
            return True
        given = headers.get(b"authorization", b"")
        return given.startswith(b"Bearer ") and hmac.compare_digest(given[7:], self.token)

    async def _http(self, scope: dict[str, Any], receive: Callable, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        headers = dict(scope["headers"])
        if path not in OPEN_PATHS and not self._authorized(headers):
            raise ProtocolError(401, "missing or wrong bearer token (header 'Authorization: Bearer <token>')")
        if path == "/v2/health/live":
            return await respond(send, 200, b'{"live":true}')
        if path == "/v2/health/ready":
            ready = bool(self.routes) and all(r.current for r in self.routes.values())
            return await respond(send, 200 if ready else 503, b'{"ready":true}' if ready else error_body("no worker yet"))
        if path == "/v2":
            body = {"name": "oltunes-gateway", "version": "2", "extensions": ["binary_tensor_data"], "models": sorted(self.routes)}
            return await respond(send, 200, orjson.dumps(body))
        if path == "/metrics":
            body, content_type = self.prom.exposition()
            return await respond(send, 200, body, content_type=content_type.encode())
        match = MODEL_PATH.match(path)
        if match is None:
            raise ProtocolError(404, "no such endpoint; see /v2/models/{name}[/ready|/infer]")
        route = self.routes.get(match.group(1))
        if route is None:
            raise ProtocolError(404, f"unknown model; this service serves {', '.join(sorted(self.routes)) or 'nothing yet'}")
        is_infer = match.group(3) == "/infer"
        if is_infer != (method == "POST") or method not in ("GET", "POST"):
            raise ProtocolError(405, "method not allowed: infer is POST, metadata and ready are GET")
        if not is_infer:
            status, out_headers, content = await self.forward(route, "GET", path, b"", {})
            return await respond(send, status, content, headers=out_headers)
        await self._infer(route, path, headers, receive, send)

    async def _infer(self, route: Route, path: str, headers: dict[bytes, bytes], receive: Callable, send: Send) -> None:
        t0 = time.perf_counter()
        status = 500
        try:
            length = headers.get(b"content-length")
            body = await read_limited(_chunks(receive), length.decode() if length else None, self.max_body_bytes)
            wait_ms = route.predicted_wait_ms()
            if route.slo_ms is not None and wait_ms > route.slo_ms:
                retry_s = max(1, math.ceil((wait_ms - route.slo_ms) / 1e3))
                raise ProtocolError(429, f"predicted wait {wait_ms:.0f} ms is over the model's {route.slo_ms:.0f} ms SLO; retry later",
                                    {"retry-after": str(retry_s)})  # fmt: skip
            fwd = {k: headers[k.encode()].decode() for k in FORWARD_REQUEST if k.encode() in headers}
            status, out_headers, content = await self.forward(route, "POST", path, body, fwd)
        except ProtocolError as e:
            status = e.status
            raise
        finally:
            self.prom.requests.labels(route.name, str(status)).inc()
            if status == 200:
                self.prom.latency.labels(route.name).observe(time.perf_counter() - t0)
        await respond(send, status, content, headers=out_headers)

    async def forward(self, route: Route, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One answer from the route's current worker, re-sending across switches and crashes (see module doc)."""
        assert self._session is not None, "the gateway is not open"
        deadline = time.monotonic() + self.retry_window_s
        attempt = 0
        reason = "no worker"
        while True:
            url = await route.wait_for_worker(deadline - time.monotonic())
            if url is not None:
                route.begin(url)
                status = 0
                try:
                    async with self._session.request(method, url + path, data=body or None, headers=headers) as r:
                        content = await r.read()
                        status = r.status
                        out = [(k, v) for k, v in r.raw_headers if k.lower() in FORWARD_RESPONSE]
                except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                    status, reason = 0, "connection"  # the worker died or is restarting
                except TimeoutError:
                    status, reason = 0, "timeout"
                finally:
                    route.end(url, answered=status == 200 and method == "POST")
                if status and status not in RETRYABLE:
                    return status, out, content
                if status:
                    reason = str(status)
            if time.monotonic() >= deadline:
                self.failures[reason] += 1
                raise ProtocolError(503, f"no worker answered within {self.retry_window_s:.0f} s (last: {reason})")
            attempt += 1
            self.prom.retries.labels(route.name).inc()
            await asyncio.sleep(min(0.01 * attempt, 0.2))


async def _chunks(receive: Callable) -> AsyncIterator[bytes]:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ProtocolError(499, "client went away")
        yield msg.get("body", b"")
        if not msg.get("more_body", False):
            return


async def respond(send: Send, status: int, body: bytes, *, headers: list[tuple[bytes, bytes]] | None = None,
                  content_type: bytes = b"application/json") -> None:  # fmt: skip
    hdrs = headers if headers and any(k.lower() == b"content-type" for k, _ in headers) else [(b"content-type", content_type), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": [*hdrs, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
