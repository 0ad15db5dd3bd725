"""Limits enforced before any parsing: the body size (413 as soon as it is known to be too large)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from oltunes.gateway.protocol import ProtocolError

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


def check_declared(content_length: str | None, limit: int) -> None:
    """Refuse a body whose declared length is over `limit` before reading a byte of it."""
    if content_length is None:
        return
    try:
        declared = int(content_length)
    except ValueError:
        raise ProtocolError(400, "header 'content-length' must be an integer") from None
    if declared > limit:
        raise ProtocolError(413, f"request body of {declared} bytes is over the limit of {limit} bytes")


async def read_limited(chunks: AsyncIterator[bytes], content_length: str | None, limit: int) -> bytes:
    """The whole body, or `ProtocolError` 413 as soon as it (declared or received) exceeds `limit` bytes."""
    check_declared(content_length, limit)
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise ProtocolError(413, f"request body is over the limit of {limit} bytes")
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)
