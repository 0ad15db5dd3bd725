"""The measurement ids a tuner has observed (exactly-once), bounded in memory and cheap to save.

Kept: the most recent ``capacity`` ids (200,000 by default), each as a 64-bit hash with its measurement's
timestamp. When an id is evicted, the *horizon* moves up to its timestamp, and from then on any measurement not
newer than the horizon counts as seen: a resend or replay of something that old is refused even though its id
was forgotten, so exactly-once holds for every measurement, at the price that one never seen but older than
the horizon (an outbox delivered after ~200,000 newer measurements) is not learnt.

Saved as two base64 arrays (8 + 8 bytes per id, ~2.1 MB at capacity) instead of a JSON list of strings: saving
is one encode of a contiguous buffer whatever the ids look like. A 64-bit hash collision between two distinct
ids (probability about ``capacity / 2**64`` per observation) would make the second count as seen.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from oltunes.types import Measurement

DEFAULT_CAPACITY = 200_000


def _key(measurement_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(measurement_id.encode(), digest_size=8).digest(), "little")


class SeenIds:
    """Bounded set of observed measurement ids with an age horizon (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self.horizon = -math.inf
        self._ids: dict[int, float] = {}  # hash -> timestamp, oldest first

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, measurement_id: str) -> bool:
        return _key(measurement_id) in self._ids

    def seen(self, m: Measurement) -> bool:
        """True when `m` was observed, or is not newer than what was forgotten."""
        return m.timestamp <= self.horizon or _key(m.measurement_id) in self._ids

    def add(self, m: Measurement) -> None:
        self._ids[_key(m.measurement_id)] = m.timestamp
        while len(self._ids) > self.capacity:
            oldest = next(iter(self._ids))
            self.horizon = max(self.horizon, self._ids.pop(oldest))

    def state_dict(self) -> dict[str, Any]:
        n = len(self._ids)
        keys = np.fromiter(self._ids.keys(), dtype="<u8", count=n)
        times = np.fromiter(self._ids.values(), dtype="<f8", count=n)
        return {"capacity": self.capacity, "horizon": self.horizon if math.isfinite(self.horizon) else None,
                "hashes": base64.b64encode(keys.tobytes()).decode(), "times": base64.b64encode(times.tobytes()).decode()}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any] | Iterable[str]) -> SeenIds:
        if not isinstance(d, dict):  # states saved before this format: a list of ids, timestamps unknown
            out = cls()
            out._ids = {_key(str(i)): -math.inf for i in d}
            return out
        out = cls(int(d["capacity"]))
        out.horizon = -math.inf if d.get("horizon") is None else float(d["horizon"])
        keys = np.frombuffer(base64.b64decode(d["hashes"]), dtype="<u8")
        times = np.frombuffer(base64.b64decode(d["times"]), dtype="<f8")
        if len(keys) != len(times):
            raise ValueError("seen: hashes and times differ in length")
        out._ids = dict(zip(keys.tolist(), times.tolist()))
        return out
