"""One way the CLI prints a table of strings (columns, then rows)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table


def print_table(console: Console, title: str, cols: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    table = Table(title=title)
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(*r)
    console.print(table)
