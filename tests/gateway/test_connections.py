"""The connection guard on a real gateway over loopback sockets: the cap evicts the oldest half-open connection,
never one that sent its request; heads, bodies and idle keep-alive connections are closed at their deadlines."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from oltunes.gateway import Gateway, GatewayServer
from oltunes.gateway.connections import ConnectionLimits

HEALTH = b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"


def _connect(url: str, first: bytes = b"") -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    if first:
        s.sendall(first)
    return s


def _read_all(s: socket.socket, timeout_s: float = 5.0) -> bytes:
    """Everything the server sends until it closes (or `timeout_s`)."""
    s.settimeout(timeout_s)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def _serve(limits: ConnectionLimits, fn):
    async def main():
        async with GatewayServer(Gateway(), limits=limits) as srv:
            return await asyncio.to_thread(fn, srv.url)

    return asyncio.run(main())


def test_at_the_cap_the_oldest_half_open_connection_makes_room_and_a_complete_request_is_answered():
    def check(url: str) -> None:
        half = [_connect(url, b"GET /v2/health/live HTTP/1.1\r\n") for _ in range(3)]  # the cap, all half-open
        time.sleep(0.3)
        s = _connect(url, HEALTH)
        assert _read_all(s, 2).startswith(b"HTTP/1.1 200")  # answered; keep-alive: read until the timeout
        first = _read_all(half[0], 2)
        assert first.startswith(b"HTTP/1.1 503") and b"limit of 3 connections" in first  # evicted, told why
        for h in (*half, s):
            h.close()

    _serve(ConnectionLimits(max_connections=3, header_timeout_s=30), check)


@pytest.mark.parametrize("sent, expect", [
    (b"", b""),  # connected, nothing sent: closed silently at the head deadline
    (b"GET /v2/health/live HTTP/1.1\r\nX-a: 1\r\n", b"HTTP/1.1 408"),  # a head that never ends
    (b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", b"HTTP/1.1 408"),  # a body that never ends
])  # fmt: skip
def test_a_request_not_in_by_its_deadline_is_closed(sent, expect):
    def check(url: str) -> None:
        s = _connect(url, sent)
        t0 = time.monotonic()
        got = _read_all(s, 10)
        waited = time.monotonic() - t0
        assert got.startswith(expect) and (expect or got == b""), got[:80]
        assert 0.5 <= waited < 4.0, waited  # the deadline (0.5 s) plus at most a sweep or two
        s.close()

    gw_limits = ConnectionLimits(max_connections=50, header_timeout_s=0.5, body_timeout_s=0.5, idle_timeout_s=30)

    async def main():
        gw = Gateway()
        gw.add("m")  # a route, so the POST is admitted and its body awaited
        async with GatewayServer(gw, limits=gw_limits) as srv:
            await asyncio.to_thread(check, srv.url)

    asyncio.run(main())


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_not_the_head_deadline():
    def check(url: str) -> None:
        s = _connect(url, HEALTH)
        s.settimeout(5)
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        assert _read_all(s, 10) == b""  # closed silently
        assert 1.5 <= time.monotonic() - t0 < 5.0
        s.close()

    _serve(ConnectionLimits(max_connections=50, header_timeout_s=0.2, idle_timeout_s=1.5), check)
