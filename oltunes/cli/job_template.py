"""`oltunes tuner job-template`: a JobSpec to fill in, every field with its meaning, allowed values and limits
(from the model itself, so a new field cannot be left out)."""

from __future__ import annotations

import typing
from typing import Any

import yaml
from pydantic.fields import FieldInfo

from oltunes.types import JobSpec

__all__ = ["EXAMPLE", "job_template"]

# A batch job of 5,000 items (the values a newcomer edits; every field of JobSpec has one)
EXAMPLE: dict[str, Any] = {
    "job_id": "my-batch-job", "kind": "batch", "family": "cnn", "slo_ms": 200.0, "accuracy_floor": 0.0,
    "objective": "energy", "arrival_rate_rps": 0.0, "items": 5000, "deadline_s": None, "trials": 0,
}  # fmt: skip


_LIMITS = (("gt", "> {}"), ("ge", ">= {}"), ("le", "<= {}"), ("max_length", "at most {} characters"))


def _limits(info: FieldInfo) -> str:
    """The field's bounds in words (``> 0``, ``<= 1``, ``at most 128 characters``)."""
    found = {attr: value for m in info.metadata for attr, _ in _LIMITS
             if (value := getattr(m, attr, None)) is not None}
    if "gt" in found:  # "> 0" says what ">= 0" would
        found.pop("ge", None)
    if found.get("le", 0) >= 1e9:  # the sanity cap on every quantity says nothing to a user
        found.pop("le")
    return ", ".join(word.format(found[attr]) for attr, word in _LIMITS if attr in found)


def _choices(annotation: Any) -> list[str]:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in args]
    return [c for a in args for c in _choices(a)]


def job_template() -> str:
    """The template: YAML, one commented field after another, the example's values filled in."""
    lines = ["# An OLTunes job (JobSpec). Fill in, then: oltunes tuner recommend --job THIS_FILE [--inventory ...]",
             "# How to read the decision it prints: docs/decisions.md", ""]
    for name, info in JobSpec.model_fields.items():
        notes = [info.description or ""]
        if choices := _choices(info.annotation):
            notes.append("one of: " + ", ".join(choices))
        if limits := _limits(info):
            notes.append(limits)
        notes.append("required" if info.is_required() else
                     "optional, default: " + ("generated" if info.default_factory else str(info.default)))
        lines.append(f"# {name}: " + "; ".join(n for n in notes if n))
        lines.append(yaml.safe_dump({name: EXAMPLE[name]}, default_flow_style=False).strip())
        lines.append("")
    return "\n".join(lines)
