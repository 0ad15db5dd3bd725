"""``python -m oltunes.gateway --route cnn=http://127.0.0.1:8001 [--route ...]``: a gateway with fixed routes.

The streaming flow runs its gateway in-process and moves the routes itself; this entry point serves fixed routes
(e.g. in front of Triton containers, or for benchmarks). The token comes from ``OLTUNES_GATEWAY_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import uvloop

from oltunes.config import get_settings
from oltunes.gateway.app import Gateway
from oltunes.gateway.connections import ConnectionLimits
from oltunes.gateway.server import KEEP_ALIVE_S, GatewayServer


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m oltunes.gateway", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--route", action="append", default=[], metavar="NAME=URL", help="model name -> worker URL")
    ap.add_argument("--slo-ms", type=float, default=None, help="admission: refuse (429) what would wait longer")
    ap.add_argument("--max-body-bytes", type=int, default=None)
    ap.add_argument("--max-connections", type=int, default=None, help="open connections at most (default: half the fd limit)")
    ap.add_argument("--header-timeout-s", type=float, default=10.0, help="a request's line and headers must be in within this")
    ap.add_argument("--body-timeout-s", type=float, default=60.0, help="a request's whole body must be in within this")
    args = ap.parse_args()
    try:
        limits = ConnectionLimits(header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                                  idle_timeout_s=KEEP_ALIVE_S,
                                  **({} if args.max_connections is None else {"max_connections": args.max_connections}))  # fmt: skip
    except ValueError as e:
        ap.error(str(e))
    settings = get_settings()
    token = settings.gateway_token.get_secret_value() if settings.gateway_token else None
    gw = Gateway(token=token) if args.max_body_bytes is None else Gateway(token=token, max_body_bytes=args.max_body_bytes)
    for spec in args.route:
        name, sep, url = spec.partition("=")
        if not sep or not url.startswith("http"):
            ap.error(f"--route must be NAME=http://host:port (got {len(spec)} characters without that shape)")
        gw.add(name, args.slo_ms).switch(url.rstrip("/"), "start")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with GatewayServer(gw, args.host, args.port, limits) as srv:
            print(srv.url, flush=True)
            await stop.wait()

    uvloop.run(run())  # libuv's event loop: less CPU per forwarded request than asyncio's


if __name__ == "__main__":
    main()
