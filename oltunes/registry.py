"""Register pluggable classes by name (`class Foo(Base, name="foo")`) and build them with `Base.make("foo")`.

Pattern after SkyPilot's load-balancing policies: no if/elif chains over strings, and an unknown
name produces an error that lists every known one.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from oltunes.errors import ConfigError

T = TypeVar("T", bound="Registered")


class Registered:
    """Mixin: each direct subclass of a registry root gets its own name -> class table."""

    _registry: ClassVar[dict[str, type]]
    name: ClassVar[str] = ""

    def __init_subclass__(cls, name: str | None = None, root: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if root or not hasattr(cls, "_registry"):
            cls._registry = {}
            return
        if name is None:  # abstract intermediate class
            return
        if name in cls._registry:
            raise ConfigError(f"{cls.__name__}: name {name!r} is already registered by {cls._registry[name].__name__}")
        cls.name = name
        cls._registry[name] = cls

    @classmethod
    def known(cls) -> list[str]:
        return sorted(cls._registry)

    @classmethod
    def lookup(cls: type[T], name: str) -> type[T]:
        try:
            return cls._registry[name]
        except KeyError:
            raise ConfigError(f"unknown {cls.__name__} {name!r}; known: {', '.join(cls.known()) or '(none)'}") from None

    @classmethod
    def make(cls: type[T], name: str, /, **kwargs: Any) -> T:
        return cls.lookup(name)(**kwargs)
