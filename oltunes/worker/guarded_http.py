"""uvicorn's httptools protocol with the gateway's connection guard: a cap on connections, read deadlines, and a
bound on the request head (slowloris; `oltunes.gateway.connections` says how).

uvicorn alone has a keep-alive timeout, but no deadline for a request's head or body and no head size limit,
and its ``limit_concurrency`` answers 503 to valid requests once half-open connections fill it. The worker is
usually behind the gateway, but it is an HTTP server of its own (a container port, a Triton-style route), so it
gets the same guard. Use: ``uvicorn.Config(app, http=guarded_protocol(limits))``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from oltunes.gateway.connections import BODY, BUSY, HEAD, IDLE, ConnectionGuard, ConnectionLimits, drop_transport, error_response
from oltunes.gateway.http1 import MAX_HEAD_BYTES


class HeadTooLarge(Exception):
    """The request line and headers are over `MAX_HEAD_BYTES` (uvicorn answers a parser error with 400 and closes)."""


def guarded_protocol(limits: ConnectionLimits | None = None) -> type[HttpToolsProtocol]:
    """A protocol class whose connections share one `ConnectionGuard` with `limits`."""
    guard = ConnectionGuard(limits)

    class GuardedHttpTools(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.guard = guard
            self.fresh = True  # no request answered yet
            self.in_message = False
            self.head_done = False
            self.head_bytes = 0

        def _settle(self) -> None:
            if self.in_message:
                state = BODY if self.head_done else HEAD
            elif self.cycle is not None and not self.cycle.response_complete:
                state = BUSY
            else:
                state = HEAD if self.fresh else IDLE
            self.guard.state(self, state)

        def drop(self, status: int | None, message: str) -> None:
            answer = None
            if status is not None and self.in_message and (self.cycle is None or not self.cycle.response_started):
                answer = error_response(status, message)
            drop_transport(self.transport, answer)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not self.guard.opened(self):
                drop_transport(transport, error_response(503, "every connection of the server is busy; retry"))

        def connection_lost(self, exc: Exception | None) -> None:
            self.guard.closed(self)
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.in_message, self.head_done, self.head_bytes = True, False, 0
            self._settle()

        def on_url(self, url: bytes) -> None:
            self._count_head(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_head(len(name) + len(value))
            super().on_header(name, value)

        def _count_head(self, n: int) -> None:
            self.head_bytes += n
            if self.head_bytes > MAX_HEAD_BYTES:
                raise HeadTooLarge

        def on_headers_complete(self) -> None:
            self.head_done = True
            super().on_headers_complete()
            self._settle()

        def on_message_complete(self) -> None:
            self.in_message = False
            super().on_message_complete()
            self._settle()

        def on_response_complete(self) -> None:
            self.fresh = False
            super().on_response_complete()
            if not self.transport.is_closing():
                self._settle()

    return GuardedHttpTools
