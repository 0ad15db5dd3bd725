"""Shared benchmark plumbing: argument parsing, a printed table, and a JSON file (written atomically)."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from oltunes.atomic import atomic_write_json
from oltunes.cli.tables import print_table as print_rows


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", type=Path, default=None, help="write results as JSON to this path")
    return p


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    # a file or a pipe gets the whole table, not one squeezed to rich's default 80 columns
    print_rows(Console(width=None if sys.stdout.isatty() else 200), title, [str(c) for c in columns],
               ([f"{v:.4g}" if isinstance(v, float) else str(v) for v in r] for r in rows))


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    payload = {**payload, "machine": machine(), "written_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    atomic_write_json(path, payload)


def alternate(fns: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each measurement function in turn, `repeats` rounds, so noise hits all of them alike."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            out[k].append(fn())
    return out


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))
