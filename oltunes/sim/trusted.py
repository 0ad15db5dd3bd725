"""Shared models the simulator builds from its own values (measurements, the candidates they report and their
co-runners, placements), without pydantic's validation or ``model_construct``'s generic walk over fields, aliases and
defaults.

Why: at cluster scale the simulator builds a measurement, and often a candidate, per job per control interval, and
validating them cost more than the compiled serving they report (``model_construct`` costs as much as validation).
The values are the engine's own, already of the types validation leaves (``float``, ``int``, ``str``, models):
``tests/sim/test_sim_trusted.py`` checks a simulated run's measurements, candidates, co-runners and placements
against the validated ones field by field and type by type, and that every field is given in the model's order.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["built"]

M = TypeVar("M", bound=BaseModel)

_set = object.__setattr__  # (the models are frozen)


def built(cls: type[M], fields: dict[str, Any], given: frozenset[str] | None = None) -> M:
    """``cls(**fields)`` as validation would leave it, for ``fields`` = every field of ``cls`` in the model's order
    with values of the validated types; ``given``: the fields passed, when some of ``fields`` stand for defaults
    (which validation leaves out of ``model_fields_set``), else all of them."""
    m = cls.__new__(cls)
    _set(m, "__dict__", fields)
    _set(m, "__pydantic_fields_set__", set(fields if given is None else given))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m
