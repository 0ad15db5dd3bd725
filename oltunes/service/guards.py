"""Edge guards of the tuning service: a request body limit enforced before parsing, and error answers that name
the field but never echo the input back (FastAPI's default 422 returns every rejected value in ``input``: a
50 MB body came back as a 29 MB error).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oltunes.errors import field_errors

MAX_DETAIL_CHARS = 500  # an error message is a reason, never a copy of the request
MAX_ERRORS = 20  # a body with 1,000 bad measurements gets the first few reasons, not a 1,000-item answer


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, from ``Content-Length`` before a byte is read, and while
    streaming for bodies without one (chunked), so an oversize request is never buffered or parsed."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await JSONResponse(status_code=413, content={"detail": self._reason()})(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # FastAPI re-raises HTTPException from body reading as is
                    raise HTTPException(status_code=413, detail=self._reason())
            return message

        await self.app(scope, limited, send)

    def _reason(self) -> str:
        return f"request body larger than {self.max_bytes} bytes; send fewer measurements per request"


def short(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(exc: Exception) -> str:
    """``Type: reason`` of an error raised on bad input, bounded; pydantic errors by field only."""
    if isinstance(exc, ValidationError):
        return short("; ".join(f"field {f!r}: {msg}" for f, msg in field_errors(exc.errors())))
    return short(f"{type(exc).__name__}: {exc}")


def install(app: FastAPI, max_body_bytes: int) -> None:
    """Add the body limit and the non-echoing 422 handler to `app`."""
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail: list[dict[str, Any]] = [
            {"field": field, "msg": msg, "type": str(err.get("type", ""))[:64]}
            for err, (field, msg) in zip(errors[:MAX_ERRORS], field_errors(errors[:MAX_ERRORS]))
        ]
        return JSONResponse(status_code=422, content={"detail": detail})
