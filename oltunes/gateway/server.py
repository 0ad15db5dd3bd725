"""Run a `Gateway` on a host:port inside the caller's event loop (the streaming flow keeps it for its lifetime).

Loopback by default; any other address needs a token (as the tuning service). Port 0 binds a free port; the
bound address is `GatewayServer.url`. Signals stay with the caller: uvicorn's handlers are not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import uvicorn

from oltunes.errors import ConfigError
from oltunes.gateway.app import Gateway
from oltunes.netaddr import is_loopback

KEEP_ALIVE_S = 75  # server side; our clients keep idle connections for less (app.CLIENT_KEEP_ALIVE_S)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to expose an unauthenticated gateway: a non-loopback `host` needs a token."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the gateway on non-loopback address {host!r} without a token: "
            "set OLTUNES_GATEWAY_TOKEN (clients send 'Authorization: Bearer <token>') or bind 127.0.0.1"
        )


class _InLoopServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Any:  # the caller owns SIGINT/SIGTERM
        yield


class GatewayServer:
    """``async with GatewayServer(gateway, host, port) as srv: srv.url``; or `start()` / `stop()`."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0) -> None:
        check_bind(host, gateway.token.decode() if gateway.token else None)
        self.gateway, self.host, self.port = gateway, host, port
        self._server: _InLoopServer | None = None
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> GatewayServer:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted connections: no Nagle delay
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise ConfigError(f"gateway: cannot bind {self.host}:{self.port} ({e.strerror}); pick another port or 0") from e
        self.port = sock.getsockname()[1]
        # keep-alive longer than clients keep idle connections (app.CLIENT_KEEP_ALIVE_S), so a client never sends on a
        # connection the server is closing at that moment
        config = uvicorn.Config(self.gateway, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=30, backlog=2048, timeout_keep_alive=KEEP_ALIVE_S)  # fmt: skip
        self._server = _InLoopServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the start-up error
                raise ConfigError("gateway stopped during start-up")
            await asyncio.sleep(0.01)
        return self

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(Exception):
                await self._task
        self._server = self._task = None

    async def __aenter__(self) -> GatewayServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
