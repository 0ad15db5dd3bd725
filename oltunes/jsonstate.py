"""Numbers in JSON state files: exact, compact, and finite.

* A numpy RNG state holds 128-bit integers, which fast JSON encoders (orjson) refuse: they are stored as decimal
  strings (`rng_state` / `set_rng_state`, which also read the plain integers of older files).
* Large float tables are stored as base64 little-endian float64 (`pack_floats` / `unpack_floats`, which also read
  the plain lists of older files): bit-exact, a third smaller than decimal text, and no per-number formatting.
* `find_nonfinite` locates a NaN or infinity anywhere in a state (packed tables included): orjson would write it
  as ``null``, so a writer must check first and refuse.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

__all__ = ["find_nonfinite", "pack_floats", "rng_state", "set_rng_state", "unpack_floats"]

_INT64 = 2**63


def _ints_to_text(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _ints_to_text(v) for k, v in x.items()}
    if isinstance(x, int) and not isinstance(x, bool) and not -_INT64 <= x < _INT64:
        return str(x)
    return x


def _text_to_ints(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _text_to_ints(v) for k, v in x.items()}
    if isinstance(x, str) and x.lstrip("-").isdigit():
        return int(x)
    return x


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """The generator's bit-generator state with integers beyond int64 as decimal strings."""
    return _ints_to_text(rng.bit_generator.state)


def set_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    """Restore a state from `rng_state` (or from an older file holding plain integers)."""
    rng.bit_generator.state = _text_to_ints(state)


def pack_floats(a: Any) -> dict[str, Any]:
    """A float array as ``{"f8": base64 of little-endian float64, "shape": [...]}``."""
    arr = np.ascontiguousarray(a, dtype="<f8")
    return {"f8": base64.b64encode(arr.tobytes()).decode("ascii"), "shape": list(arr.shape)}


def _is_packed(x: Any) -> bool:
    return type(x) is dict and len(x) == 2 and "f8" in x and "shape" in x


def unpack_floats(x: Any) -> np.ndarray:
    """The array `pack_floats` packed, or a nested list of numbers (the plain form of older files)."""
    if not isinstance(x, dict):
        return np.asarray(x, dtype=float)
    raw = base64.b64decode(x["f8"], validate=True)
    return np.frombuffer(raw, dtype="<f8").reshape([int(n) for n in x["shape"]]).astype(float)


def find_nonfinite(x: Any, where: str = "") -> str | None:
    """Where the first NaN or infinity in `x` is (a path like ``model.W[3]``), or None if every number is finite.

    Lists of numbers, flat or nested, are checked as one numpy array; only other lists are walked in Python.
    """
    if isinstance(x, (float, np.floating)):
        return None if math.isfinite(x) else where or "."
    if isinstance(x, dict):
        if _is_packed(x):
            return _in_array(unpack_floats(x), where)
        for k, v in x.items():
            found = find_nonfinite(v, f"{where}.{k}" if where else str(k))
            if found is not None:
                return found
        return None
    if isinstance(x, (list, tuple)):
        if x and not isinstance(x[0], str):
            try:
                if all(map(math.isfinite, x)):  # the common case: a flat list of numbers
                    return None
            except (TypeError, OverflowError):  # nested lists, not only numbers, or an int beyond any float
                pass
            try:
                arr = np.asarray(x)
            except (TypeError, ValueError):  # ragged
                arr = None
            if arr is not None and arr.dtype.kind in "biuf":
                return _in_array(arr, where)
        for i, v in enumerate(x):
            if not isinstance(v, (str, int)):  # ints and bools are always finite
                found = find_nonfinite(v, f"{where}[{i}]")
                if found is not None:
                    return found
        return None
    if isinstance(x, np.ndarray):
        return _in_array(x, where)
    return None


def _in_array(arr: np.ndarray, where: str) -> str | None:
    if arr.dtype.kind not in "fc":
        return None
    bad = np.flatnonzero(~np.isfinite(arr))
    return None if bad.size == 0 else f"{where}[{int(bad[0])}]"
