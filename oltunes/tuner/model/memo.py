"""One memo scheme for the tuner: values built on demand and dropped as a whole when their version changes.

The tuner memoises several things between recommendations (FM index arrays, prior grids, margins, co-runner
plans). Each depends on some state — the FM's vocabulary, the variant catalogue, the observation count — so
each memo is built with a function that returns that state's version, and forgets everything when it moves.
A size bound keeps a long-running service (whose keys include cluster shapes) from growing without end.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["Memo", "put_bounded"]

MAX_ENTRIES = 4096


def put_bounded(table: dict[Hashable, Any], key: Hashable, value: Any, limit: int = MAX_ENTRIES) -> Any:
    """``table[key] = value``, the table first emptied if it holds ``limit`` entries (a memo table's bound);
    returns ``value``."""
    if len(table) >= limit:
        table.clear()
    table[key] = value
    return value


class Memo:
    """``get(key, build)``: ``build()`` once per key until ``version()`` changes (or the bound is hit).

    Examples
    --------
    >>> n = [0]
    >>> memo = Memo(lambda: n[0])
    >>> memo.get("a", lambda: 1), memo.get("a", lambda: 2)
    (1, 1)
    >>> n[0] += 1
    >>> memo.get("a", lambda: 2)
    2
    """

    def __init__(self, version: Callable[[], Hashable], max_entries: int = MAX_ENTRIES) -> None:
        self._version_of = version
        self._version: Hashable = object()
        self._max = max_entries
        self._values: dict[Hashable, Any] = {}

    def _current(self) -> dict[Hashable, Any]:
        """The values of the current version (``get`` checks it inline: a decision asks a few hundred times, an
        observation too)."""
        v = self._version_of()
        if v != self._version:
            self._values, self._version = {}, v
        return self._values

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        v = self._version_of()
        if v != self._version:
            self._values, self._version = {}, v
        val = self._values.get(key)
        if val is None:
            val = put_bounded(self._values, key, build(), self._max)
        return val

    def table(self, name: Hashable) -> dict[Hashable, Any]:
        """A plain dict living as long as this version (for callers that check their own hits): one of the values,
        dropped with them when the bound is hit."""
        return self.get(("table", name), dict)
