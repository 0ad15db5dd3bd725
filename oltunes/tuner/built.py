"""Kept only for ``estimate_grid`` and ``explain`` (other parts' modules) until they build these three models with
the plain constructors; the decision side no longer uses it. A model is built without pydantic's validation when
plain checks here show the values meet every constraint it declares (else the validating constructor is used)."""

from __future__ import annotations

import re
from typing import Any

from oltunes.trusted import trusted_model
from oltunes.types import (
    ID_PATTERN,
    MAX_ID_CHARS,
    MAX_LIST,
    MAX_QUANTITY,
    MAX_SETTING,
    MAX_TEXT_CHARS,
    Alternative,
    Candidate,
    CoRunner,
    Prediction,
    Variant,
)

__all__ = ["alternative", "candidate", "prediction"]

_ID = re.compile(ID_PATTERN.removeprefix("^").removesuffix("$"))  # fullmatch: "$" would pass a final newline


def _quantity(x: Any) -> bool:
    return type(x) is float and 0.0 <= x <= MAX_QUANTITY  # (NaN and inf fail the comparisons)


def _setting(x: Any) -> bool:
    return type(x) is int and 1 <= x <= MAX_SETTING


def _text(x: Any) -> bool:
    return type(x) is str and len(x) <= MAX_TEXT_CHARS


def _id(x: Any) -> bool:
    return type(x) is str and len(x) <= MAX_ID_CHARS and _ID.fullmatch(x) is not None


def prediction(latency_p99_ms: Any, energy_j_per_item: Any, throughput_items_per_s: Any, margin_ms: Any) -> Prediction:
    values = {"latency_p99_ms": latency_p99_ms, "energy_j_per_item": energy_j_per_item,
              "throughput_items_per_s": throughput_items_per_s, "margin_ms": margin_ms}
    if all(map(_quantity, values.values())):
        return trusted_model(Prediction, values)
    return Prediction(**values)


def candidate(pool: Any, accelerator: Any, variant: Any, batch_size: Any, concurrency: Any,
              co_runners: Any) -> Candidate:
    values = {"pool": pool, "accelerator": accelerator, "variant": variant, "batch_size": batch_size,
              "concurrency": concurrency, "co_runners": co_runners}
    if (_id(pool) and _id(accelerator) and type(variant) is Variant and _setting(batch_size) and _setting(concurrency)
            and type(co_runners) is tuple and len(co_runners) <= MAX_LIST
            and all(type(c) is CoRunner for c in co_runners)):
        return trusted_model(Candidate, values)
    return Candidate(**values)


def alternative(candidate_key: Any, prediction: Any, reason: Any) -> Alternative:
    values = {"candidate_key": candidate_key, "prediction": prediction, "reason": reason}
    if _text(candidate_key) and type(prediction) is Prediction and _text(reason):
        return trusted_model(Alternative, values)
    return Alternative(**values)
