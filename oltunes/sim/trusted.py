"""Frozen models built from values the simulator computed itself, without pydantic's per-call costs.

The engine makes a measurement, its candidate and the co-runners it names for every job in every control interval
(two hundred thousand measurements at 10,000 devices). ``Model(...)`` validates each field (tens of microseconds for
a measurement) and ``Model.model_construct`` loops over the fields in Python. :func:`maker` returns a function that
builds exactly what ``model_construct`` builds (the same ``__dict__`` in field order, the same fields set, defaults
filled) in one comprehension when every field is given. Nothing is checked: only for values already valid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["maker"]

M = TypeVar("M", bound=BaseModel)


def maker(cls: type[M]) -> Callable[..., M]:
    """``cls.model_construct``, faster; a model with aliases, private attributes, a post-init hook or extra fields
    gets ``model_construct`` itself."""
    fields = cls.__pydantic_fields__
    if (cls.__pydantic_post_init__ or cls.__private_attributes__ or cls.__pydantic_root_model__
            or cls.model_config.get("extra") == "allow"
            or any(f.alias is not None or f.validation_alias is not None for f in fields.values())):
        return cls.model_construct
    names = tuple(fields)
    new, set_ = cls.__new__, object.__setattr__

    def make(**values: Any) -> M:
        m = new(cls)
        if len(values) == len(names):  # every field given (the engine's case)
            d = {n: values[n] for n in names}
            given = set(values)
        else:
            d, given = {}, set()
            for n in names:
                if n in values:
                    d[n] = values[n]
                    given.add(n)
                elif not fields[n].is_required():
                    d[n] = fields[n].get_default(call_default_factory=True, validated_data=d)
        set_(m, "__dict__", d)
        set_(m, "__pydantic_fields_set__", given)
        set_(m, "__pydantic_extra__", None)
        set_(m, "__pydantic_private__", None)
        return m

    return make
