"""Run a `Gateway` on a host:port inside the caller's event loop (the streaming flow keeps it for its lifetime).

Loopback by default; any other address needs a token (as the tuning service). Port 0 binds a free port; the
bound address is `GatewayServer.url`. Signals stay with the caller.
"""

from __future__ import annotations

import socket

from oltunes.errors import ConfigError
from oltunes.gateway.app import Gateway
from oltunes.gateway.connections import ConnectionLimits
from oltunes.gateway.http1 import Http1Server
from oltunes.netaddr import check_bind

KEEP_ALIVE_S = 75  # server side; our clients keep idle connections for less (app.CLIENT_KEEP_ALIVE_S)
GRACEFUL_STOP_S = 30  # in-flight requests get this long to be answered when the gateway stops


class GatewayServer:
    """``async with GatewayServer(gateway, host, port) as srv: srv.url``; or `start()` / `stop()`.

    `limits`: the connection cap and read deadlines (`oltunes.gateway.connections`; keep-alive is `KEEP_ALIVE_S`).
    """

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0, limits: ConnectionLimits | None = None) -> None:
        check_bind(host, gateway.token.decode() if gateway.token else None, service="gateway",
                   token_setting="OLTUNES_GATEWAY_TOKEN")
        self.gateway, self.host, self.port = gateway, host, port
        self.limits = limits or ConnectionLimits(idle_timeout_s=KEEP_ALIVE_S)
        self._server: Http1Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> GatewayServer:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise ConfigError(f"gateway: cannot bind {self.host}:{self.port} ({e.strerror}); pick another port or 0") from e
        self.port = sock.getsockname()[1]
        await self.gateway.open()
        # keep-alive longer than clients keep idle connections (app.CLIENT_KEEP_ALIVE_S), so a client never sends on a
        # connection the server is closing at that moment
        self._server = Http1Server(self.gateway, self.limits)
        await self._server.start(sock)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(GRACEFUL_STOP_S)
            self._server = None
        await self.gateway.close()

    async def __aenter__(self) -> GatewayServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
