"""The worker's hot path, ``POST /v2/models/{name}[/versions/{v}]/infer``, as a bare ASGI route in front of FastAPI.

Why: per request, FastAPI's routing, dependency solving and Request/Response objects cost about twice what the
inference route itself does (a cProfile of the worker under a closed loop: 2.8 s of framework against 1.4 s in
the route, 3,554 requests), and the worker is the costly hop of a streaming service. Everything else (metadata,
health, metrics, the window, plain ``/infer``) stays on FastAPI; the answers are the same bytes.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from oltunes.gateway.limits import read_limited
from oltunes.gateway.protocol import HEADER_LENGTH, ProtocolError, decode_request, encode_response

INFER_PATH = re.compile(r"^/v2/models/([^/]{1,128})(?:/versions/[^/]{1,32})?/infer$")
_HEADER_LENGTH = HEADER_LENGTH.encode()

Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


class _Gone(Exception):
    """The client disconnected before its body was in."""


async def _body_chunks(receive: Callable[[], Awaitable[dict]]) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body", False):
            return


class InferRoute:
    """ASGI: inference requests are served here, everything else by `app` (lifespan included).

    `worker` is `oltunes.worker.serve.Worker` (admission, batching, accounting); `state` is `app`'s.
    """

    def __init__(self, app: Any, worker: Any, max_body_bytes: int) -> None:
        self.app, self.worker, self.max_body_bytes = app, worker, max_body_bytes
        self.state = app.state

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
        match = INFER_PATH.match(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        w = self.worker
        try:
            w.check_name(match.group(1))
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            body = await read_limited(_body_chunks(receive), length.decode("latin-1") if length else None, self.max_body_bytes)
            binary = headers.get(_HEADER_LENGTH)
            req, tensors = decode_request(body, binary.decode("latin-1") if binary is not None else None)
            if len(tensors) != 1 or w.first.input_name not in tensors:
                raise ProtocolError(400, f"'inputs' must hold exactly one tensor named '{w.first.input_name}'")
            out, _ = await w.run(tensors[w.first.input_name])
            content, extra = encode_response(req, w.name, {w.first.output_name: out})
        except _Gone:
            w.count(499)
            return
        except ProtocolError as e:
            w.count(e.status)
            await _respond(send, e.status, e.body(), {"content-type": "application/json", **e.headers})
            return
        w.answered(time.perf_counter() - t0, len(out))
        await _respond(send, 200, content, extra)


async def _respond(send: Callable[[dict], Awaitable[None]], status: int, body: bytes, headers: dict[str, str]) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
