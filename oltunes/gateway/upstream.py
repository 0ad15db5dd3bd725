"""Pooled keep-alive HTTP/1.1 connections to the workers (httptools on asyncio): the gateway's upstream client.

A request takes an idle connection to its worker (or opens one), writes the head and the body as given (no
re-encoding: tensors pass through as bytes), and returns the status, the headers the caller asked to keep and
the body. The connection goes back to the pool once the answer is complete, unless either side said close.
Idle connections are dropped after ``idle_timeout_s``, shorter than the servers' keep-alive, so a request is
rarely written to a connection the server is closing at that moment; when it is, the caller sees a
`ConnectionError` and re-sends (inference is idempotent).
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httptools

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


class UpstreamClosed(ConnectionError):
    """The worker closed the connection (or sent something that is not HTTP) before its answer was complete."""


class _Connection(asyncio.Protocol):
    def __init__(self, pool: UpstreamPool, key: tuple[str, int]) -> None:
        self.pool, self.key = pool, key
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Answer] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(UpstreamClosed("the worker closed the connection"))
        self.pool._forget(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._fail(UpstreamClosed("the worker's answer is not valid HTTP"))
            self.close()

    def on_message_begin(self) -> None:
        self.headers, self.body = [], []

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in self.pool.keep_headers:
            self.headers.append((name, value))

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        if waiter is not None and not waiter.done():
            waiter.set_result((self.parser.get_status_code(), self.headers, body))
        if self.parser.should_keep_alive() and waiter is not None:
            self.pool._release(self)
        else:
            self.close()

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def send(self, data: list[bytes]) -> asyncio.Future[Answer]:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.writelines(data)  # type: ignore[union-attr]
        return self.waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class UpstreamPool:
    """Keep-alive connections per worker address.

    Parameters
    ----------
    keep_headers
        Response header names (lower case) returned to the caller; the rest are dropped unread.
    idle_timeout_s
        An idle connection older than this is closed instead of reused.
    """

    def __init__(self, keep_headers: frozenset[bytes], idle_timeout_s: float) -> None:
        self.keep_headers = keep_headers
        self.idle_timeout_s = idle_timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._addresses: dict[str, tuple[str, int, bytes]] = {}

    def _address(self, base_url: str) -> tuple[str, int, bytes]:
        addr = self._addresses.get(base_url)
        if addr is None:
            u = urlsplit(base_url)
            host, port = u.hostname or "127.0.0.1", u.port or 80
            addr = self._addresses[base_url] = (host, port, f"host: {u.netloc}\r\n".encode())
        return addr

    async def request(self, base_url: str, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
                      timeout_s: float) -> Answer:  # fmt: skip
        """One answer from `base_url`; `ConnectionError`/`OSError` if the worker is gone, `TimeoutError` if slow."""
        host, port, host_line = self._address(base_url)
        key = (host, port)
        conn = self._take(key)
        if conn is None:
            loop = asyncio.get_running_loop()
            _, conn = await asyncio.wait_for(loop.create_connection(lambda: _Connection(self, key), host, port), timeout_s)
        head = [method, b" ", path, b" HTTP/1.1\r\n", host_line]
        for k, v in headers:
            head += (k, b": ", v, b"\r\n")
        if body or method == b"POST":
            head.append(b"content-length: %d\r\n" % len(body))
        head.append(b"\r\n")
        data = [b"".join(head), body] if len(body) > 65536 else [b"".join([*head, body])]
        answer = conn.send(data)
        timer = asyncio.get_running_loop().call_later(timeout_s, _expire, conn)
        try:
            return await answer
        except asyncio.CancelledError:
            conn.close()  # the answer may still come: this connection cannot be reused
            raise
        finally:
            timer.cancel()

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be closing
            if not conn.closed and time.monotonic() - conn.idle_since <= self.idle_timeout_s:
                return conn
            conn.close()
        return None

    def _release(self, conn: _Connection) -> None:
        now = time.monotonic()
        conn.idle_since = now
        idle = self._idle.setdefault(conn.key, [])
        idle.append(conn)
        while idle and (idle[0].closed or now - idle[0].idle_since > self.idle_timeout_s):
            idle.pop(0).close()  # the oldest idle ones: the server may be about to close them

    def _forget(self, conn: _Connection) -> None:
        """A closed connection leaves the pool (and a stopped worker's address with its last one)."""
        idle = self._idle.get(conn.key)
        if idle is not None and conn in idle:
            idle.remove(conn)
            if not idle:
                del self._idle[conn.key]

    def close(self) -> None:
        for idle in list(self._idle.values()):
            for conn in list(idle):
                conn.close()
        self._idle.clear()


def _expire(conn: _Connection) -> None:
    conn._fail(TimeoutError("the worker did not answer in time"))
    conn.close()
