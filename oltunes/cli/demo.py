"""`oltunes demo`: the main job on embedded defaults."""

from __future__ import annotations

import typer


def register(root: typer.Typer) -> None:
    """Attach the demo command to the root CLI (filled in by the flows work)."""
