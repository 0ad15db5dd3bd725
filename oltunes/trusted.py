"""Models built from values already known to be valid, without pydantic's validation or ``model_construct``'s
generic walk over fields, aliases and defaults: the simulator's own measurements, candidates, co-runners and
placements (``oltunes.sim``), and the tuner's decisions once plain checks vouch for their values
(``oltunes.tuner.built``). Never for data from outside.

Why: at cluster scale the simulator builds a measurement, and often a candidate, per job per control interval, and
validating them cost more than the compiled serving they report (``model_construct`` costs as much as validation).
The simulator's values are its own, already of the types validation leaves (``float``, ``int``, ``str``, models):
``tests/sim/test_sim_trusted.py`` checks a simulated run's measurements, candidates, co-runners and placements
against the validated ones field by field and type by type, and that every field is given in the model's order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["trusted_model"]

M = TypeVar("M", bound=BaseModel)

_set = object.__setattr__  # (the models are frozen)


def trusted_model(cls: type[M], fields: dict[str, Any], given: Iterable[str] | None = None) -> M:
    """``cls(**fields)`` as validation would leave it, for ``fields`` = every field of ``cls`` in the model's order
    with values of the validated types; ``given``: the fields passed, when some of ``fields`` stand for defaults
    (which validation leaves out of ``model_fields_set``), else all of them."""
    m = cls.__new__(cls)
    _set(m, "__dict__", fields)
    _set(m, "__pydantic_fields_set__", set(fields if given is None else given))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m
