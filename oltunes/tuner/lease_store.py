"""The lease book's file: every change written atomically and durably, read back when the service starts.

Expiry times are wall-clock, so a restarted service still knows what runs where and what has expired meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from oltunes.atomic import atomic_write_text
from oltunes.errors import ConfigError
from oltunes.tuner.lease_types import Lease, Waiting

__all__ = ["BookStore"]


class _BookFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    leases: list[Lease]
    waiting: list[Waiting]


class BookStore:
    """``save(leases, waiting)`` / ``load()`` of the book in ``path`` (None: memory only, nothing is written)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def save(self, leases: Iterable[Lease], waiting: Iterable[Waiting]) -> None:
        if self.path is None:
            return
        book = _BookFile(leases=list(leases), waiting=list(waiting))
        atomic_write_text(self.path, book.model_dump_json(), durable=True)  # pydantic's encoder: ~20x json's

    def load(self) -> tuple[list[Lease], list[Waiting]] | None:
        """The leases and waiting jobs saved; None when there is no file."""
        if self.path is None or not self.path.exists():
            return None
        try:
            book = _BookFile.model_validate_json(self.path.read_bytes())
        except (OSError, ValueError, ValidationError) as e:
            raise ConfigError(f"lease book {self.path}: unreadable ({type(e).__name__}); move it aside to start "
                              "with no leases (running jobs re-acquire on their next heartbeat)") from None
        return book.leases, book.waiting
