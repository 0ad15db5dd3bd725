"""Plumbing both flows share: parameter errors, the cluster, the tuner and its warm start."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from oltunes.config import REPO_ROOT, Settings, get_settings
from oltunes.errors import ConfigError, TunerUnavailable
from oltunes.inventory import load_inventory
from oltunes.launchers import Launcher
from oltunes.tracking import Tracker
from oltunes.types import ClusterState, Variant

log = logging.getLogger(__name__)


def validate(model: type[BaseModel], **params: Any) -> Any:
    """Validate flow parameters; the error names the parameter (fail fast, before any work starts)."""
    try:
        return model(**params)
    except ValidationError as e:
        first = e.errors()[0]
        name = ".".join(str(x) for x in first["loc"]) or "parameters"
        raise ConfigError(f"parameter {name!r}: {first['msg']} (got {first.get('input')!r})") from e


def check_family(family: str, variants: list[Variant], launcher: str) -> list[Variant]:
    known = sorted({v.family for v in variants})
    if family not in known:
        hint = "" if known else " (no variants: build the zoo with `oltunes zoo build`)"
        raise ConfigError(f"parameter 'family': unknown {family!r} for launcher {launcher!r}; known: {', '.join(known)}{hint}")
    return [v for v in variants if v.family == family]


def cluster_for(launcher: type[Launcher], inventory: str | None) -> ClusterState:
    path = Path(inventory) if inventory else REPO_ROOT / launcher.default_inventory
    return ClusterState(pools=load_inventory(path))


def tuner_settings(launcher: type[Launcher], settings: Settings | None = None) -> Settings:
    """Simulated runs learn in a tuner state of their own, so simulated GPUs never mix with real measurements."""
    s = settings or get_settings()
    return s.model_copy(update={"home": s.home / "simulated"}) if launcher.simulated else s


def make_tuner(launcher: type[Launcher], variants: list[Variant]) -> tuple[Any, Settings]:
    from oltunes.tuner.factory import get_tuner

    s = tuner_settings(launcher)
    tuner = get_tuner(s, variants=variants)
    add = getattr(tuner, "add_variants", None)  # a tuner restored from disk learns of variants built since
    if add is not None:
        try:
            add(variants)
        except TunerUnavailable as e:  # a remote tuner that is down: its fallback already knows the variants
            log.warning("could not register variants with the tuning service: %s", e)
    return tuner, s


def make_tracker() -> Tracker:
    return Tracker()
