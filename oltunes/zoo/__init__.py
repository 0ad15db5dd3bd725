"""The model zoo: real variants (family × size × precision) with accuracy measured in ONNX Runtime.

>>> from oltunes.zoo import build_zoo, list_variants          # doctest: +SKIP
>>> variants = build_zoo()                                    # doctest: +SKIP
>>> {v.name: v.accuracy for v in variants}                    # doctest: +SKIP
"""

from oltunes.zoo.build import PRECISIONS, build_zoo, get_variant, list_entries, list_variants, register_variant
from oltunes.zoo.data import digits_split, make_dataset
from oltunes.zoo.families import SIZES, Family
from oltunes.zoo.manifest import ZooEntry

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
