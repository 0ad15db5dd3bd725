"""A lean HTTP/1.1 server for the gateway's hot path: httptools parsing on a plain asyncio protocol, bodies as bytes.

Why not an ASGI server: on a loaded CPU the gateway's per-request cost is its throughput, and a framework's
message passing, scope building and task per request cost several times the forwarding itself. Here a request
costs one parse, one upstream round trip (`oltunes.gateway.upstream`) and one write.

The application (`Handler`) is asked twice per request:

- ``head(request)`` once the headers are in, before any body byte is kept: it may answer at once (a refusal:
  401, 404, 405, 413 from the declared length, 429 from admission control), and then the body is discarded
  as it arrives instead of being buffered. A client that sent ``Expect: 100-continue`` gets ``100 Continue``
  only if the request was not refused.
- ``handle(request)`` with the whole body, for everything ``head`` let through. A body that grows past
  ``max_body_bytes`` without a declared length gets ``too_large(request)`` at once.

Answers go out in request order on each connection (pipelining-safe). A refusal that leaves an unread body
(413) is sent with ``Connection: close``; the rest of the body is read and dropped for a short grace so the
client sees the answer instead of a reset. Connections are capped and every request has read deadlines
(`oltunes.gateway.connections`: a head within 10 s, a body within 60 s, keep-alive idle for 75 s; at the cap the
oldest half-open connection makes room). `Http1Server.stop` stops accepting, lets in-flight requests finish,
then closes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import unquote

import httptools

from oltunes.gateway.connections import BODY, BUSY, HEAD, IDLE, ConnectionGuard, ConnectionLimits, drop_transport, error_response

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024  # request line + headers
MAX_PIPELINED = 16  # requests queued on one connection before we stop reading from it
CLOSE_GRACE_S = 1.0  # after a refusal that leaves a body unread: keep discarding this long before closing
JSON = b"application/json"


@dataclass(slots=True)
class Request:
    method: bytes
    path: str  # percent-decoded, without the query
    raw_path: bytes  # as the client sent it (forwarded unchanged)
    headers: dict[bytes, bytes]  # lower-case names
    body: bytes = b""
    context: Any = None  # set by `Handler.head` for `Handler.handle` (e.g. the route)


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # beyond content-type and content-length
    content_type: bytes = JSON
    close: bool = False  # close the connection after this answer (the request body was not read)


class Handler(Protocol):
    max_body_bytes: int

    def head(self, request: Request) -> Response | None: ...

    def too_large(self, request: Request) -> Response: ...

    def handle(self, request: Request) -> Awaitable[Response]: ...

    def abandoned(self, request: Request) -> None: ...  # `head` let it through, but its body never came


_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode()
    return line


def encode(response: Response, close: bool) -> list[bytes]:
    """The answer's bytes: the head and, when large, the body apart (no copy)."""
    parts = [_status_line(response.status), b"content-type: ", response.content_type, b"\r\n"]
    for k, v in response.headers:
        parts += (k, b": ", v, b"\r\n")
    parts.append(b"content-length: %d\r\n%s\r\n" % (len(response.body), b"connection: close\r\n" if close else b""))
    if len(response.body) > 65536:
        return [b"".join(parts), response.body]
    parts.append(response.body)
    return [b"".join(parts)]


class ServerConnection(asyncio.Protocol):
    """One client connection: parse, ask the handler, answer in order."""

    def __init__(self, handler: Handler, server: Http1Server) -> None:
        self.handler, self.server = handler, server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[tuple[Request, Response | None, bool]] = deque()
        self.task: asyncio.Task | None = None
        self.guard = server.guard
        self.fresh = True  # no request answered yet: waiting for one is a head deadline, not keep-alive
        self.in_message = False  # a request has begun and is not all in
        self.discarding = False  # after a refusal with `close`: input is dropped unparsed
        self.closing = False  # the server is stopping: close after the current answer
        self.paused = False
        self._new_message()

    def _new_message(self) -> None:
        self.url = b""
        self.headers: dict[bytes, bytes] = {}
        self.head_bytes = 0
        self.body: list[bytes] = []
        self.size = 0
        self.request: Request | None = None
        self.answer: Response | None = None  # set early: a refusal (the body is dropped)
        self.reading = False  # `head` let the request through and its body is arriving

    def _settle(self) -> None:
        """Tell the guard which deadline applies now (`oltunes.gateway.connections`)."""
        if self.in_message:
            state = HEAD if self.request is None else BODY
        elif self.task is not None or self.queue:
            state = BUSY
        else:
            state = HEAD if self.fresh else IDLE
        self.guard.state(self, state)

    def drop(self, status: int | None, message: str) -> None:
        """The guard closes this connection (a deadline passed, or it was evicted at the cap)."""
        answer = error_response(status, message) if status is not None and self.in_message and not self.discarding else None
        self.discarding = True
        drop_transport(self.transport, answer)

    # -- asyncio -------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)
        if not self.guard.opened(self):
            self.discarding = True
            drop_transport(self.transport, error_response(503, "every connection of the server is busy; retry"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.guard.closed(self)
        self.discarding = True
        self._abandon()

    def _abandon(self) -> None:
        if self.reading and self.request is not None:
            self.reading = False
            self.handler.abandoned(self.request)

    def data_received(self, data: bytes) -> None:
        if self.discarding:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.discarding = True
            self._abandon()
            self._enqueue(None, Response(400, b'{"error":"malformed HTTP request"}', close=True), False)

    # -- httptools callbacks -------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._new_message()
        self.in_message = True
        self._settle()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value)
        if self.head_bytes <= MAX_HEAD_BYTES:
            self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        if self.discarding:
            return
        try:
            raw_path = httptools.parse_url(self.url).path or b"/"
        except httptools.HttpParserInvalidURLError:
            raw_path = b""
        req = self.request = Request(self.parser.get_method(), unquote(raw_path.decode("latin-1")), raw_path, self.headers)
        if not raw_path:
            self.answer = Response(400, b'{"error":"malformed request target"}')
        elif self.head_bytes > MAX_HEAD_BYTES:
            self.answer = Response(431, b'{"error":"request line and headers are over 64 KiB"}', close=True)
        else:
            self.answer = self.handler.head(req)
        expects = self.headers.get(b"expect", b"").lower() == b"100-continue"
        if self.answer is not None and (self.answer.close or expects):
            self.answer.close = True  # the body stays unread: answer now, drop the rest
            self._refuse_now()
        else:
            self.reading = self.answer is None
            if expects:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[union-attr]
        self._settle()

    def on_body(self, chunk: bytes) -> None:
        if self.answer is not None:
            return  # refused: dropped, not kept
        self.size += len(chunk)
        if self.size > self.handler.max_body_bytes:
            self.body.clear()
            self.reading = False
            self.answer = self.handler.too_large(self.request)  # type: ignore[arg-type]
            self.answer.close = True
            self._refuse_now()
            return
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        self.in_message = False
        req = self.request
        if self.discarding or req is None:  # answered already (refused early, or the connection is gone)
            return
        self.reading = False
        if self.answer is None:
            req.body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self._enqueue(req, self.answer, self.parser.should_keep_alive())
        self._settle()

    # -- answering -----------------------------------------------------------------------------------------
    def _refuse_now(self) -> None:
        self.discarding = True
        self._enqueue(self.request, self.answer, False)

    def _enqueue(self, req: Request | None, answer: Response | None, keep_alive: bool) -> None:
        if answer is not None and self.task is None and not self.queue:
            self._write(answer, keep_alive)  # answered without a task: refusals cost next to nothing
            return
        self.queue.append((req, answer, keep_alive))  # type: ignore[arg-type]
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._serve())
        if len(self.queue) > MAX_PIPELINED and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    async def _serve(self) -> None:
        try:
            while self.queue:
                req, answer, keep_alive = self.queue.popleft()
                if answer is None:
                    try:
                        answer = await self.handler.handle(req)
                    except Exception:
                        log.exception("gateway: request failed")
                        answer = Response(500, b'{"error":"internal error in the gateway"}')
                self._write(answer, keep_alive)
                if self.paused and len(self.queue) <= MAX_PIPELINED // 2 and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
        finally:
            self.task = None
            self._settle()

    def _write(self, answer: Response, keep_alive: bool) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        close = answer.close or not keep_alive or self.closing
        t.writelines(encode(answer, close))
        self.fresh = False
        if not close:
            return
        if answer.close:  # a body may still be arriving: drop it for a moment, so the client reads the answer
            self.discarding = True
            asyncio.get_running_loop().call_later(CLOSE_GRACE_S, t.close)
        else:
            t.close()

    @property
    def idle(self) -> bool:
        return self.task is None and not self.queue

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Http1Server:
    """``await Http1Server(handler, limits).start(sock)``; ``await stop(grace_s)``. `limits`: the connection cap and
    the read and keep-alive deadlines (`oltunes.gateway.connections`)."""

    def __init__(self, handler: Handler, limits: ConnectionLimits | None = None) -> None:
        self.handler = handler
        self.guard = ConnectionGuard(limits)
        self.connections: set[ServerConnection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, sock: socket.socket, backlog: int = 2048) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: ServerConnection(self.handler, self), sock=sock, backlog=backlog)

    async def stop(self, grace_s: float = 30.0) -> None:
        """Stop accepting; idle connections close now, busy ones after their answers (at most `grace_s`)."""
        if self._server is None:
            return
        self._server.close()
        self.guard.stop()
        deadline = time.monotonic() + grace_s
        while True:
            for c in list(self.connections):
                c.closing = True
                if c.idle:
                    c.close()
            if not self.connections or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        for c in list(self.connections):
            if c.transport is not None:
                c.transport.abort()
        self._server = None
