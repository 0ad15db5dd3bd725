"""``python -m oltunes.gateway --route cnn=http://127.0.0.1:8001 [--route ...]``: a gateway with fixed routes.

``--shadow cnn=http://127.0.0.1:8002`` mirrors ``--shadow-share`` of cnn's answered requests (at most
``--shadow-max-rps``) to a second worker, answers discarded (`oltunes.gateway.shadow`).

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
from oltunes.gateway.shadow import DEFAULT_SHARE, ShadowBudget


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
    ap.add_argument("--shadow", action="append", default=[], metavar="NAME=URL", help="model name -> its shadow worker")
    ap.add_argument("--shadow-share", type=float, default=DEFAULT_SHARE, help="share of answered requests mirrored")
    ap.add_argument("--shadow-max-rps", type=float, default=20.0, help="mirrored requests per second at most")
    args = ap.parse_args()
    try:
        limits = ConnectionLimits(header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                                  idle_timeout_s=KEEP_ALIVE_S,
                                  **({} if args.max_connections is None else {"max_connections": args.max_connections}))  # fmt: skip
        budget = ShadowBudget(share=args.shadow_share, max_rps=args.shadow_max_rps)
    except ValueError as e:
        ap.error(str(e))
    settings = get_settings()
    token = settings.gateway_token.get_secret_value() if settings.gateway_token else None
    gw = Gateway(token=token) if args.max_body_bytes is None else Gateway(token=token, max_body_bytes=args.max_body_bytes)
    for spec in args.route:
        name, url = _name_url(ap, "--route", spec)
        gw.add(name, args.slo_ms).switch(url, "start")
    shadows = [_name_url(ap, "--shadow", spec) for spec in args.shadow]
    if unknown := [name for name, _ in shadows if name not in gw.routes]:
        ap.error(f"--shadow names {len(unknown)} model(s) without a --route")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with GatewayServer(gw, args.host, args.port, limits) as srv:
            for name, url in shadows:
                await gw.shadow(name, url, budget)
            print(srv.url, flush=True)
            await stop.wait()

    uvloop.run(run())  # libuv's event loop: less CPU per forwarded request than asyncio's


def _name_url(ap: argparse.ArgumentParser, option: str, spec: str) -> tuple[str, str]:
    name, sep, url = spec.partition("=")
    if not sep or not url.startswith("http"):
        ap.error(f"{option} must be NAME=http://host:port (got {len(spec)} characters without that shape)")
    return name, url.rstrip("/")


if __name__ == "__main__":
    main()
