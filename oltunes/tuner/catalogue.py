"""The variant catalogue the tuner chooses from, grouped by family, with a version that memos key on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oltunes.errors import ConfigError
from oltunes.types import Variant

__all__ = ["Catalogue"]


class Catalogue:
    """Variants by name and by family; ``version`` moves on every change."""

    def __init__(self, variants: Sequence[Variant] = ()) -> None:
        self.variants: list[Variant] = []
        self._by_family: dict[str, list[Variant]] = {}
        self.version = 0
        self.add(variants)

    def add(self, variants: Iterable[Variant]) -> int:
        """Add variants (a variant with a known name replaces it). Returns how many."""
        n = 0
        by_name = {v.name: i for i, v in enumerate(self.variants)}
        for v in variants:
            if not isinstance(v, Variant):
                raise ConfigError(f"add_variants: expected Variant, got {type(v).__name__}")
            if v.name in by_name:
                self.variants[by_name[v.name]] = v
            else:
                by_name[v.name] = len(self.variants)
                self.variants.append(v)
            n += 1
        self._by_family = {}
        for v in self.variants:
            self._by_family.setdefault(v.family, []).append(v)
        self.version += 1
        return n

    def family(self, name: str) -> list[Variant]:
        """The family's variants in catalogue order (empty if unknown)."""
        return self._by_family.get(name, [])

    def families(self) -> list[str]:
        return sorted(self._by_family)
