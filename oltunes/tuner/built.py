"""A decision's models (`Decision` and its parts) built without pydantic's validation when plain checks here show
the tuner's values already meet every constraint the model declares: validation would give the very same object
(its ``__dict__`` in field order, the names given as its set fields), at a tenth of the cost (the ~10 models of a
decision were ~8 % of its time, issue 14). Any value the checks do not vouch for goes to the validating
constructor, which returns or raises exactly as before. Models from outside (HTTP bodies) are always validated.
"""

from __future__ import annotations

import re
from typing import Any, get_args

from oltunes.trusted import trusted_model
from oltunes.types import (
    ID_PATTERN,
    MAX_ID_CHARS,
    MAX_LIST,
    MAX_QUANTITY,
    MAX_SETTING,
    Candidate,
    ColocationGroup,
    CoRunner,
    Decision,
    Explanation,
    DecisionSource,
    Precision,
    Prediction,
    clamp_quantity,
    Variant,
    new_id,
)

__all__ = ["candidate", "co_runner", "decision", "group", "prediction"]

_ID = re.compile(ID_PATTERN.removeprefix("^").removesuffix("$"))  # fullmatch: "$" would pass a final newline
_SOURCES = frozenset(get_args(DecisionSource))
_PRECISIONS = frozenset(get_args(Precision))


def _quantity(x: Any) -> bool:
    return type(x) is float and 0.0 <= x <= MAX_QUANTITY  # (NaN and inf fail the comparisons)


def _setting(x: Any) -> bool:
    return type(x) is int and 1 <= x <= MAX_SETTING


def _id(x: Any) -> bool:
    return type(x) is str and len(x) <= MAX_ID_CHARS and _ID.fullmatch(x) is not None


def _label(x: Any) -> bool:
    return type(x) is str and 1 <= len(x) <= MAX_ID_CHARS


def co_runner(job_id: Any, family: Any, variant: Any, size: Any, precision: Any, batch_size: Any,
              load: Any) -> CoRunner:
    values = {"job_id": job_id, "family": family, "variant": variant, "size": size, "precision": precision,
              "batch_size": batch_size, "load": load}
    if (_id(job_id) and _id(family) and _id(variant) and _label(size) and type(precision) is str
            and precision in _PRECISIONS and _setting(batch_size) and _quantity(load)):
        return trusted_model(CoRunner, values)
    return CoRunner(**values)


def prediction(latency_p99_ms: Any, energy_j_per_item: Any, throughput_items_per_s: Any, margin_ms: Any) -> Prediction:
    # Clamped into range (issue 31): an extrapolation from extreme but valid measurements must not make the
    # decision invalid; NaN latency/energy/margin become the top (never preferred), NaN throughput 0.
    values = {"latency_p99_ms": clamp_quantity(latency_p99_ms), "energy_j_per_item": clamp_quantity(energy_j_per_item),
              "throughput_items_per_s": clamp_quantity(throughput_items_per_s, nan=0.0),
              "margin_ms": clamp_quantity(margin_ms)}
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


def group(pool: Any, device: Any, members: Any, predicted_slowdown: Any) -> ColocationGroup:
    """A co-location group (a fresh ``group_id``, as its default factory gives); ``predicted_slowdown`` is kept as
    given (validation would copy it: the caller's dict must be its own)."""
    values = {"pool": pool, "device": device, "members": members, "predicted_slowdown": predicted_slowdown}
    if (_id(pool) and type(device) is int and 0 <= device <= MAX_SETTING and type(members) is tuple
            and 1 <= len(members) <= MAX_LIST and all(_id(m) for m in members)
            and type(predicted_slowdown) is dict and len(predicted_slowdown) <= MAX_LIST
            and all(_id(k) and _quantity(v) for k, v in predicted_slowdown.items())):
        return trusted_model(ColocationGroup, {"group_id": new_id(), **values}, given=values)
    return ColocationGroup(**values)


def decision(job_id: Any, candidate: Any, group: Any, source: Any, feasible: Any, explanation: Any) -> Decision:
    values = {"job_id": job_id, "candidate": candidate, "group": group, "source": source, "feasible": feasible,
              "explanation": explanation}
    if (_id(job_id) and type(candidate) is Candidate and (group is None or type(group) is ColocationGroup)
            and source in _SOURCES and type(feasible) is bool
            and type(explanation) is Explanation):
        return trusted_model(Decision, {"decision_id": new_id(), **values}, given=values)
    return Decision(**values)
