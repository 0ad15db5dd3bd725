"""`oltunes worker` commands."""

from __future__ import annotations

import typer


def register(root: typer.Typer) -> None:
    """Attach this area's commands to the root CLI (filled in by the worker work)."""
