"""`oltunes demo`: the main job on embedded defaults (Prefect ephemeral API, MLflow SQLite, local launcher)."""

from __future__ import annotations

from typing import Annotated

import typer


def demo(
    batch_jobs: Annotated[int, typer.Option(min=1, help="batch jobs to run in sequence")] = 6,
    items: Annotated[int, typer.Option(min=100, help="items per batch job")] = 4000,
    stream_seconds: Annotated[float, typer.Option(min=5, help="length of the streaming session")] = 40.0,
) -> None:
    """Run batch jobs and a short streaming session so you can watch the learner improve; then open MLflow."""
    # The flows (and Prefect) are imported only here: the `oltunes` library itself never imports Prefect.
    from flows.demo import run_demo

    run_demo(batch_jobs=batch_jobs, items=items, stream_seconds=stream_seconds)


def register(root: typer.Typer) -> None:
    """Attach the demo command to the root CLI."""
    root.command("demo")(demo)
