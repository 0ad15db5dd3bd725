"""The gateway: one stable Open Inference Protocol endpoint in front of every model's current worker.

Served by `oltunes.gateway.http1` (no framework: it routes by path and forwards bytes). Everything that can be
decided from the request line and headers is decided before the body is read (`Gateway.head`): the token
(health probes stay open), the route by the model name in the path (404 in the protocol's shape), the
method, the declared body size (413), and admission control: a route holds at most as many requests
outstanding as its worker answers within the model's SLO (`oltunes.gateway.admission`); one more gets 429 with
``Retry-After`` at once, before any work is done for it.
A body that grows over the limit without a declared size gets 413 as soon as it does.

Admitted requests are forwarded as bytes over pooled keep-alive connections (`oltunes.gateway.upstream`) to
the route's current worker; the tensors are never parsed here. An attempt that finds the worker gone
(connection refused or reset: it died or is restarting) or draining (502/503) is re-sent to whatever worker
the route points at then, until ``retry_window_s`` has passed; only then is it answered 503 and counted in
``failures``. Inference is idempotent, so a retried request is answered once. The worker's own answers, 429
with ``Retry-After`` included, pass through.

A route may have a shadow (`shadow`): a share of its answered requests is mirrored to a candidate's worker
(`oltunes.gateway.shadow`), off the request path; the client's answer is the primary's, always.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import time
from collections import Counter
from dataclasses import dataclass

import orjson

from oltunes.gateway.http1 import Request, Response
from oltunes.gateway.limits import DEFAULT_MAX_BODY_BYTES, check_declared
from oltunes.gateway.protocol import HEADER_LENGTH, ProtocolError, error_body
from oltunes.gateway.routing import Route, SwitchReason
from oltunes.gateway.shadow import ShadowBudget, ShadowMirror
from oltunes.gateway.telemetry import ServingMetrics
from oltunes.gateway.upstream import UpstreamPool

CLIENT_KEEP_ALIVE_S = 15  # idle upstream connections are closed by us first (servers keep them for 75 s)

MODEL_PATH = re.compile(r"^/v2/models/([^/]{1,128})(/versions/[^/]{1,32})?(/ready|/infer|/config)?$")
RETRYABLE = {502, 503}
FORWARD_REQUEST = (b"content-type", HEADER_LENGTH.encode())
FORWARD_RESPONSE = frozenset((b"inference-header-content-length", b"retry-after"))  # + content-type, kept apart
OPEN_PATHS = ("/v2/health/live", "/v2/health/ready")
NO_WORKER_RETRY_AFTER_S = b"1"
SHADOW_OUTCOMES = ("seen", "sent", "ok", "failed", "dropped", "over_budget")


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
        self.upstream: UpstreamPool | None = None
        self._counters: dict[tuple[str, int], object] = {}  # (model, status) -> its Prometheus child (hot path)
        self.shadows: dict[str, ShadowMirror] = {}  # model -> the mirror of its shadow worker

    # -- routes -------------------------------------------------------------------------------------------
    def add(self, name: str, slo_ms: float | None = None) -> Route:
        if name in self.routes:
            raise ValueError(f"model {name!r} is already routed")
        route = Route(name=name, slo_ms=slo_ms, on_switch=self._switched)
        self.routes[name] = route
        self.prom.queue_depth.labels(name).set_function(lambda: route.outstanding)
        self.prom.concurrency_limit.labels(name).set_function(lambda: (route.limits and route.limits.limit) or 0)
        return route

    def _switched(self, name: str, reason: SwitchReason) -> None:
        if reason == "switch":
            self.prom.switches.labels(name).inc()
        elif reason == "restart":
            self.prom.restarts.labels(name).inc()

    async def shadow(self, name: str, url: str, budget: ShadowBudget | None = None) -> ShadowMirror:
        """Mirror a share of model `name`'s answered requests to the worker at `url` from now on (replacing any
        shadow it had); the mirror's counts and windows are the shadow's measurements."""
        if name not in self.routes:
            raise ValueError(f"model {name!r} is not routed")
        await self.unshadow(name)
        mirror = self.shadows[name] = ShadowMirror(url, budget)
        for outcome in SHADOW_OUTCOMES:
            self.prom.shadow.labels(name, outcome).set_function(lambda o=outcome: mirror.counts[o])
        mirror.start()
        return mirror

    async def unshadow(self, name: str) -> ShadowMirror | None:
        """Stop mirroring model `name` (its queued shadow requests are dropped); the mirror that stopped, if any."""
        mirror = self.shadows.pop(name, None)
        if mirror is not None:
            await mirror.close()
        return mirror

    async def open(self) -> None:
        if self.upstream is None:
            self.upstream = UpstreamPool(FORWARD_RESPONSE | {b"content-type"}, CLIENT_KEEP_ALIVE_S)  # < the worker's keep-alive

    async def close(self) -> None:
        for name in list(self.shadows):
            await self.unshadow(name)
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None

    # -- before the body (http1.Handler) --------------------------------------------------------------------
    def head(self, req: Request) -> Response | None:
        """An answer now (health, metadata of the service, metrics, every refusal), or None to read the body."""
        try:
            return self._head(req)
        except ProtocolError as e:
            route = req.context
            if isinstance(route, Route):
                self._count(route.name, e.status)
            return refusal(e)

    def _head(self, req: Request) -> Response | None:
        path = req.path
        if path not in OPEN_PATHS and not self._authorized(req.headers):
            raise ProtocolError(401, "missing or wrong bearer token (header 'Authorization: Bearer <token>')")
        if path == "/v2/health/live":
            return Response(200, b'{"live":true}')
        if path == "/v2/health/ready":
            ready = bool(self.routes) and all(r.current for r in self.routes.values())
            return Response(200, b'{"ready":true}') if ready else Response(503, error_body("no worker yet"))
        if path == "/v2":
            body = {"name": "oltunes-gateway", "version": "2", "extensions": ["binary_tensor_data"], "models": sorted(self.routes)}
            return Response(200, orjson.dumps(body))
        if path == "/metrics":
            body, content_type = self.prom.exposition()
            return Response(200, body, content_type=content_type.encode())
        match = MODEL_PATH.match(path)
        if match is None:
            raise ProtocolError(404, "no such endpoint; see /v2/models/{name}[/versions/1][/ready|/config|/infer]")
        route = self.routes.get(match.group(1))
        if route is None:
            raise ProtocolError(404, f"unknown model; this service serves {', '.join(sorted(self.routes)) or 'nothing yet'}")
        is_infer = match.group(3) == "/infer"
        if is_infer != (req.method == b"POST") or req.method not in (b"GET", b"POST"):
            raise ProtocolError(405, "method not allowed: infer is POST, metadata, config and ready are GET")
        if is_infer:
            req.context = route  # counted from here on
            length = req.headers.get(b"content-length")
            check_declared(length.decode("latin-1") if length else None, self.max_body_bytes)
            admit(route)
            # outstanding from now, not from when the body is in: a burst arriving together is not all admitted
            req.context = Admission(route, route.admit(), time.perf_counter())
        return None

    def too_large(self, req: Request) -> Response:
        e = ProtocolError(413, f"request body is over the limit of {self.max_body_bytes} bytes")
        if isinstance(req.context, Admission):
            req.context.route.unadmit()
            self._count(req.context.route.name, 413)
        return refusal(e)

    def abandoned(self, req: Request) -> None:
        """The client went away (or broke the protocol) before its admitted request's body was in."""
        if isinstance(req.context, Admission):
            req.context.route.unadmit()
            self._count(req.context.route.name, 499)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        if self.token is None:
            return True
        given = headers.get(b"authorization", b"")
        return given.startswith(b"Bearer ") and hmac.compare_digest(given[7:], self.token)

    # -- with the body ----------------------------------------------------------------------------------------
    async def handle(self, req: Request) -> Response:
        if req.context is None:  # model metadata or readiness: forwarded, not counted as inference
            route = self.routes[MODEL_PATH.match(req.path).group(1)]  # type: ignore[union-attr]
            try:
                return _answer(*(await self.forward(route, b"GET", req.raw_path, b"", []))[:3])
            except ProtocolError as e:
                return refusal(e)
        admission: Admission = req.context
        route = admission.route
        route.unadmit()  # in flight from here on (`forward` counts it before its first wait)
        fwd = [(k, req.headers[k]) for k in FORWARD_REQUEST if k in req.headers]
        retried = False
        try:
            status, out, content, retried = await self.forward(route, b"POST", req.raw_path, req.body, fwd)
            answer = _answer(status, out, content)
        except ProtocolError as e:
            answer = refusal(e)
        self._count(route.name, answer.status)
        if answer.status == 200 and not retried:  # a re-sent request waited out a crash or switch, not a queue
            seconds = time.perf_counter() - admission.t0
            route.answered(admission.position, seconds)
            self.prom.latency.labels(route.name).observe(seconds)
        if answer.status == 200 and self.shadows:
            self._mirror(route.name, req.raw_path, req.body, fwd)
        return answer

    def _mirror(self, name: str, path: bytes, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        """Offer an answered request to the model's shadow (no I/O, no wait); nothing a shadow does reaches the client."""
        mirror = self.shadows.get(name)
        if mirror is None:
            return
        try:
            mirror.offer(path, body, headers)
        except Exception:  # noqa: BLE001 -- a broken mirror must not turn into the client's error
            mirror.counts["offer_errors"] += 1

    async def forward(self, route: Route, method: bytes, path: bytes, body: bytes,
                      headers: list[tuple[bytes, bytes]]) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:  # fmt: skip
        """One answer from the route's current worker, re-sending across switches and crashes (see module doc):
        status, headers, body, and whether it had to be re-sent."""
        assert self.upstream is not None, "the gateway is not open"
        deadline = time.monotonic() + self.retry_window_s
        attempt = 0
        reason = "no worker"
        while True:
            url = route.current or await route.wait_for_worker(deadline - time.monotonic())
            if url is not None:
                route.begin(url)
                status = 0
                try:
                    status, out, content = await self.upstream.request(url, method, path, headers, body, self.attempt_timeout_s)
                except TimeoutError:
                    reason = "timeout"
                except OSError:  # refused, reset, closed: the worker died or is restarting
                    reason = "connection"
                    route.outage = url == route.current
                finally:
                    route.end(url)
                if status and status not in RETRYABLE:
                    if url == route.current:
                        route.outage = False
                    return status, out, content, attempt > 0
                if status:
                    reason = str(status)
            if time.monotonic() >= deadline:
                self.failures[reason] += 1
                raise ProtocolError(503, f"no worker answered within {self.retry_window_s:.0f} s (last: {reason})",
                                    {"retry-after": NO_WORKER_RETRY_AFTER_S.decode()})  # fmt: skip
            attempt += 1
            self.prom.retries.labels(route.name).inc()
            await asyncio.sleep(min(0.01 * attempt, 0.2))

    def _count(self, model: str, status: int) -> None:
        counter = self._counters.get((model, status))
        if counter is None:
            counter = self._counters[(model, status)] = self.prom.requests.labels(model, str(status))
        counter.inc()  # type: ignore[attr-defined]


@dataclass(slots=True)
class Admission:
    route: Route
    position: int  # in the route's queue when admitted, itself included
    t0: float  # perf_counter at admission


def admit(route: Route) -> None:
    """Refuse (429 with Retry-After) a request beyond what its model's worker can answer within the SLO (module doc)."""
    if not route.admits():
        limits = route.limits
        assert limits is not None and limits.limit is not None
        raise ProtocolError(429, f"{route.outstanding} requests outstanding, at the limit of {limits.limit:.0f} that meets "
                                 f"the model's {route.slo_ms:.0f} ms SLO; retry later",
                            {"retry-after": str(limits.retry_after_s(route.outstanding))})  # fmt: skip


def refusal(e: ProtocolError) -> Response:
    # a 413 leaves the body unread: the connection is closed after the answer rather than reading it
    return Response(e.status, e.body(), [(k.encode(), v.encode()) for k, v in e.headers.items()], close=e.status == 413)


def _answer(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Response:
    content_type = next((v for k, v in headers if k == b"content-type"), b"application/json")
    return Response(status, body, [(k, v) for k, v in headers if k != b"content-type"], content_type=content_type)
