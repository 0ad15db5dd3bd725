"""Placement policies, one file each, registered by name: ``Policy.make(name, ctx=PolicyContext(...))``."""

from oltunes.policies import (  # noqa: F401  (importing registers them)
    diagnostics,
    gavel_like,
    least_loaded,
    oltunes_policy,
    oracle,
    random_policy,
    round_robin,
    static_profile,
)
from oltunes.policies.base import Policy, PolicyContext

__all__ = ["Policy", "PolicyContext"]
