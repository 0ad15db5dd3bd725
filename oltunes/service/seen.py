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
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from oltunes.types import Measurement

DEFAULT_CAPACITY = 200_000


def _key(measurement_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(measurement_id.encode(), digest_size=8).digest(), "little")


class SeenIds:
    """Bounded set of observed measurement ids with an age horizon (see the module docstring).

    The hashes and timestamps live in two ring buffers (saved as they are: no per-id work on save); a dict maps
    each hash to its slot for the membership test.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 1:
            raise ValueError(f"seen: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.horizon = -math.inf
        self._slot: dict[int, int] = {}  # hash -> ring slot
        self._keys = np.zeros(min(capacity, 1024), dtype="<u8")
        self._times = np.zeros(len(self._keys), dtype="<f8")
        self._added = 0  # ids ever added; the next slot is _added % capacity

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, measurement_id: str) -> bool:
        return _key(measurement_id) in self._slot

    def seen(self, m: Measurement) -> bool:
        """True when `m` was observed, or is not newer than what was forgotten."""
        return m.timestamp <= self.horizon or _key(m.measurement_id) in self._slot

    def fresh(self, ms: Sequence[Measurement]) -> list[bool]:
        """Per measurement, whether it is new: not seen, nor repeating an id before it in ``ms``."""
        ids: set[str] = set()
        out = []
        for m in ms:
            new = not self.seen(m) and m.measurement_id not in ids
            out.append(new)
            if new:
                ids.add(m.measurement_id)
        return out

    def add(self, m: Measurement) -> None:
        self._put(_key(m.measurement_id), m.timestamp)

    def _put(self, key: int, timestamp: float) -> None:
        if key in self._slot:
            return
        slot = self._added % self.capacity
        if slot >= len(self._keys):  # still growing towards capacity
            size = min(self.capacity, 2 * len(self._keys))
            self._keys = np.resize(self._keys, size)
            self._times = np.resize(self._times, size)
        if self._added >= self.capacity:  # full: forget the oldest, whose slot this is
            old = int(self._keys[slot])
            if self._slot.get(old) == slot:
                del self._slot[old]
            self.horizon = max(self.horizon, float(self._times[slot]))
        self._keys[slot], self._times[slot] = key, timestamp
        self._slot[key] = slot
        self._added += 1

    def _ordered(self) -> tuple[np.ndarray, np.ndarray]:
        """Hashes and timestamps, oldest first."""
        n = min(self._added, self.capacity)
        start = self._added % self.capacity if self._added > self.capacity else 0
        idx = (np.arange(n) + start) % self.capacity if start else slice(0, n)
        return self._keys[idx], self._times[idx]

    def state_dict(self) -> dict[str, Any]:
        keys, times = self._ordered()
        return {"capacity": self.capacity, "horizon": self.horizon if math.isfinite(self.horizon) else None,
                "hashes": base64.b64encode(keys.tobytes()).decode(),
                "times": base64.b64encode(times.tobytes()).decode()}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any] | Iterable[str]) -> SeenIds:
        if not isinstance(d, dict):  # states saved before this format: a list of ids, timestamps unknown
            out = cls()
            for i in d:
                out._put(_key(str(i)), -math.inf)
            return out
        out = cls(int(d["capacity"]))
        keys = np.frombuffer(base64.b64decode(d["hashes"]), dtype="<u8")
        times = np.frombuffer(base64.b64decode(d["times"]), dtype="<f8")
        if len(keys) != len(times) or len(keys) > out.capacity:
            raise ValueError("seen: hashes and times differ in length or exceed the capacity")
        for k, t in zip(keys.tolist(), times.tolist()):
            out._put(k, t)
        out.horizon = -math.inf if d.get("horizon") is None else float(d["horizon"])
        return out
