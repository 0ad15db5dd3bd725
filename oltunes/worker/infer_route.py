"""The worker's body-reading routes as bare ASGI in front of FastAPI: ``POST /v2/models/{name}[/versions/{v}]/infer``
(the Open Inference Protocol) and ``POST /infer`` (the plain JSON form the launchers and the CLI use).

Why bare: per request, FastAPI's routing, dependency solving and Request/Response objects cost about twice what the
inference route itself does (a cProfile of the worker under a closed loop: 2.8 s of framework against 1.4 s in
the route, 3,554 requests), and the worker is the costly hop of a streaming service. It is also where every body
is read, so every body is read the same way: streamed with a size limit (`read_limited`: 413 as soon as the
declared or received size is over, before anything is parsed). A body over the limit on any other path is
refused from its declared length too; FastAPI's routes read no body. Everything else (metadata, config, health,
metrics, the window) stays on FastAPI.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oltunes.errors import invalid
from oltunes.gateway.limits import check_declared, read_limited
from oltunes.gateway.protocol import HEADER_LENGTH, ProtocolError, decode_request, encode_response
from oltunes.worker.session import predictions

INFER_PATH = re.compile(r"^/v2/models/([^/]{1,128})(?:/versions/([^/]{1,32}))?/infer$")
PLAIN_PATH = "/infer"
_HEADER_LENGTH = HEADER_LENGTH.encode()

Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


class PlainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inputs: list[Any] = Field(min_length=1, description="items; each any nesting of numbers matching the model input")
    ids: list[int | str] | None = None


class _Gone(Exception):
    """The client disconnected before its body was in."""


async def _body_chunks(receive: Receive) -> AsyncIterator[bytes]:
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

    `worker` is `oltunes.worker.serve.Worker` (admission, batching, accounting, the model's metadata); `state`
    is `app`'s.
    """

    def __init__(self, app: Any, worker: Any, max_body_bytes: int) -> None:
        self.app, self.worker, self.max_body_bytes = app, worker, max_body_bytes
        self.state = app.state

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, post = scope["path"], scope["method"] == "POST"
        match = INFER_PATH.match(path) if post else None
        if match is None and not (post and path == PLAIN_PATH):
            length = dict(scope["headers"]).get(b"content-length")
            try:
                check_declared(length.decode("latin-1") if length else None, self.max_body_bytes)
            except ProtocolError as e:
                await _respond(send, e.status, e.body(), {"content-type": "application/json"})
                return
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        w = self.worker
        try:
            if match is not None:
                w.check_name(match.group(1))
                w.meta.check_version(match.group(2))
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            body = await read_limited(_body_chunks(receive), length.decode("latin-1") if length else None, self.max_body_bytes)
            if match is not None:
                content, extra, items = await self._open_inference(w, body, headers.get(_HEADER_LENGTH))
            else:
                content, extra, items = await self._plain(w, body, t0)
        except _Gone:
            w.count(499)
            return
        except ProtocolError as e:
            w.count(e.status)
            await _respond(send, e.status, e.body(), {"content-type": "application/json", **e.headers})
            return
        w.answered(time.perf_counter() - t0, items)
        await _respond(send, 200, content, extra)

    @staticmethod
    async def _open_inference(w: Any, body: bytes, binary: bytes | None) -> tuple[bytes, dict[str, str], int]:
        req, tensors = decode_request(body, binary.decode("latin-1") if binary is not None else None, w.meta)
        out, _ = await w.run(tensors[w.first.input_name])
        content, extra = encode_response(req, w.name, {w.first.output_name: out})
        return content, extra, len(out)

    @staticmethod
    async def _plain(w: Any, body: bytes, t0: float) -> tuple[bytes, dict[str, str], int]:
        try:
            req = PlainRequest.model_validate(orjson.loads(body))
        except orjson.JSONDecodeError:
            raise ProtocolError(422, "invalid request: the body is not valid JSON") from None
        except ValidationError as e:
            raise ProtocolError(422, str(invalid(e, "invalid request"))) from None
        ids, n = req.ids, len(req.inputs)
        if ids is not None and len(ids) != n:
            raise ProtocolError(400, f"'ids' has {len(ids)} entries but 'inputs' has {n}")
        if n > w.cfg.max_request_items:
            raise ProtocolError(413, f"{n} items in one request; the limit is {w.cfg.max_request_items}")
        try:
            x = np.asarray(req.inputs, dtype=w.first.input_dtype)
        except (ValueError, TypeError, OverflowError):
            raise ProtocolError(400, "'inputs' must be a list of equally shaped numeric items") from None
        del req  # its Python lists: the array holds the items from here on, while the request waits for its batch
        out, batch_items = await w.run(x)
        answer = {"predictions": predictions(out).tolist(), "ids": ids, "model": w.name, "batch_items": batch_items,
                  "latency_ms": round((time.perf_counter() - t0) * 1e3, 4)}  # fmt: skip
        return orjson.dumps(answer), {"content-type": "application/json"}, len(out)


async def _respond(send: Send, status: int, body: bytes, headers: dict[str, str]) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
