"""The 18-variant catalogue (2 families x 3 sizes x 3 precisions) the service and client tests share."""

from __future__ import annotations

from oltunes.types import Variant


def make_variants() -> list[Variant]:
    return [
        Variant(family=f, name=f"{f}-{s}-{p}", size=s, precision=p, accuracy=acc - loss, params=params)
        for f in ("cnn", "vit")
        for s, params, acc in (("s", 1_000_000, 0.90), ("m", 5_000_000, 0.94), ("l", 20_000_000, 0.97))
        for p, loss in (("fp32", 0.0), ("fp16", 0.002), ("int8", 0.01))
    ]
