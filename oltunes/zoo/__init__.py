"""The model zoo: real variants (family x size x precision) with accuracy measured in ONNX Runtime.

Reading the zoo (`list_variants`, `get_variant`, `make_dataset`, `register_variant`) never imports torch;
`build_zoo` and `Family` do, on first use.

>>> from oltunes.zoo import build_zoo, list_variants          # doctest: +SKIP
>>> variants = build_zoo()                                    # doctest: +SKIP
>>> {v.name: v.accuracy for v in variants}                    # doctest: +SKIP
"""

from importlib import import_module
from typing import Any

from oltunes.zoo.catalog import get_variant, list_entries, list_variants
from oltunes.zoo.data import digits_split, make_dataset
from oltunes.zoo.manifest import ZooEntry
from oltunes.zoo.register import register_variant
from oltunes.zoo.spec import PRECISIONS, SIZES

_LAZY = {"build_zoo": "oltunes.zoo.build", "Family": "oltunes.zoo.families"}  # these import torch


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'oltunes.zoo' has no attribute {name!r}")


__all__ = [
    "PRECISIONS",
    "SIZES",
    "Family",
    "ZooEntry",
    "build_zoo",
    "digits_split",
    "get_variant",
    "list_entries",
    "list_variants",
    "make_dataset",
    "register_variant",
]
