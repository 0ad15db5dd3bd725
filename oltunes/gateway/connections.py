"""`ConnectionGuard`: a cap on open connections and deadlines on reading requests (slowloris), for the gateway and the
workers.

A client that opens connections and sends a request slowly, or not at all, holds a file descriptor each; with
enough of them (the process's fd limit) nobody else gets in. The guard bounds what such connections can hold:

- **Deadlines.** Every connection is in one of four states. *head*: connected, or a request begun, its request
  line and headers not all in (``header_timeout_s``); *body*: the head in, the body arriving (``body_timeout_s``
  for the whole body); *idle*: keep-alive between requests (``idle_timeout_s``); *busy*: its answer is being
  computed (no deadline here: the answer has its own). A connection past its state's deadline is closed, with
  ``408`` first when part of a request was in. Deadlines run from entering the state, so a header every few
  seconds does not extend them.
- **A cap.** At most ``max_connections`` are open. One more evicts the connection that has waited longest in
  *head*, else the longest *idle*, else the longest in *body* (``503`` first when part of a request was in); only
  when every connection is busy is the new one refused (``503``, closed). So a flood of half-open connections
  costs the oldest of them their place, never a client that sends its request at once, and open fds stay
  bounded. The default cap is half the process's fd limit (the other half is for connections to the workers).

Each state is an insertion-ordered dict of the connections in it, oldest first: a transition, an eviction and a
timeout are O(1), and the sweep (once a second) looks only at connections that are due.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Protocol

import orjson

HEAD, BODY, IDLE, BUSY = "head", "body", "idle", "busy"
SWEEP_EVERY_S = 1.0
MAX_DEFAULT_CONNECTIONS = 16_384


def default_max_connections() -> int:
    """Half the soft fd limit, less a reserve for files and listeners (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 2 * MAX_DEFAULT_CONNECTIONS
    return max(16, min(MAX_DEFAULT_CONNECTIONS, soft // 2 - 64))


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = field(default_factory=default_max_connections)
    header_timeout_s: float = 10.0  # request line + headers, from the connection (or the request's first byte)
    body_timeout_s: float = 60.0  # the whole body, from the end of the head
    idle_timeout_s: float = 75.0  # keep-alive between requests

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds")


class Guarded(Protocol):
    def drop(self, status: int | None, message: str) -> None:
        """Close the connection; first answer `status` (with `message`) if part of a request was in."""


class ConnectionGuard:
    """Tracks a server's connections (`opened`, `state`, `closed`) and enforces `limits` (module doc)."""

    def __init__(self, limits: ConnectionLimits | None = None) -> None:
        self.limits = limits or ConnectionLimits()
        self._in: dict[str, OrderedDict[Guarded, float]] = {HEAD: OrderedDict(), BODY: OrderedDict(), IDLE: OrderedDict()}
        self._state: dict[Guarded, str] = {}
        self.evicted = self.timed_out = self.refused = 0
        self._sweeper: asyncio.Task | None = None

    @property
    def open(self) -> int:
        return len(self._state)

    def opened(self, conn: Guarded) -> bool:
        """A new connection (in *head*); False if it must be refused: every open connection is busy."""
        self._ensure_sweeping()
        while self.open >= self.limits.max_connections:
            if not self._evict_one():
                self.refused += 1
                return False
        self._state[conn] = HEAD
        self._in[HEAD][conn] = time.monotonic()
        return True

    def state(self, conn: Guarded, state: str) -> None:
        """`conn` is now in `state` (its deadline restarts only when the state changes)."""
        old = self._state.get(conn)
        if old is None or old == state:
            return
        if old != BUSY:
            del self._in[old][conn]
        self._state[conn] = state
        if state != BUSY:
            self._in[state][conn] = time.monotonic()

    def closed(self, conn: Guarded) -> None:
        old = self._state.pop(conn, None)
        if old is not None and old != BUSY:
            del self._in[old][conn]

    def _evict_one(self) -> bool:
        for state in (HEAD, IDLE, BODY):
            waiting = self._in[state]
            if waiting:
                conn, _ = waiting.popitem(last=False)
                del self._state[conn]
                self.evicted += 1
                conn.drop(503, f"the server is at its limit of {self.limits.max_connections} connections; retry")
                return True
        return False

    def sweep(self, now: float | None = None) -> None:
        """Close every connection past its state's deadline."""
        now = time.monotonic() if now is None else now
        lim = self.limits
        for state, timeout_s, status in ((HEAD, lim.header_timeout_s, 408), (BODY, lim.body_timeout_s, 408),
                                         (IDLE, lim.idle_timeout_s, None)):  # fmt: skip
            waiting = self._in[state]
            while waiting:
                conn, since = next(iter(waiting.items()))
                if now - since <= timeout_s:
                    break
                waiting.popitem(last=False)
                del self._state[conn]
                if status is not None:
                    self.timed_out += 1
                conn.drop(status, f"the request was not received within {timeout_s:g} s")

    def _ensure_sweeping(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            self.sweep()

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None


def drop_transport(transport: asyncio.Transport | None, answer: bytes | None) -> None:
    """Write `answer` (a whole HTTP response) if given, then close; abort if the peer is not reading, so the fd is
    freed now rather than when a stalled write buffer drains."""
    if transport is None or transport.is_closing():
        return
    if answer:
        transport.write(answer)
    if transport.get_write_buffer_size():
        transport.abort()
    else:
        transport.close()


def error_response(status: int, message: str) -> bytes:
    """A complete ``Connection: close`` answer in the protocol's error shape."""
    body = orjson.dumps({"error": message})
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body  # fmt: skip
