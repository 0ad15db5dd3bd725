"""Read the zoo: list and look up variants (torch-free; building lives in `oltunes.zoo.build`)."""

from __future__ import annotations

from pathlib import Path

from oltunes.errors import ModelError
from oltunes.types import Variant
from oltunes.zoo.manifest import ZooEntry, load_entries, zoo_dir_or_default


def list_variants(zoo_dir: Path | str | None = None, family: str | None = None) -> list[Variant]:
    """Variants in the manifest (empty list when the zoo has not been built)."""
    return [e.variant() for e in list_entries(zoo_dir) if family is None or e.family == family]


def list_entries(zoo_dir: Path | str | None = None) -> list[ZooEntry]:
    """Manifest entries with their bookkeeping (input shape, eval set, hashes)."""
    return load_entries(zoo_dir_or_default(zoo_dir))


def get_variant(name: str, zoo_dir: Path | str | None = None) -> Variant:
    """One variant by name, or `ModelError` listing the known names."""
    found = {v.name: v for v in list_variants(zoo_dir)}
    if name not in found:
        known = ", ".join(found) or "none: run `oltunes zoo build`"
        raise ModelError(f"unknown variant {name!r}; known: {known}")
    return found[name]
