"""Plumbing both flows share: parameter errors, the cluster, the tuner and its warm start, orphan control."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from oltunes.config import Settings, get_settings
from oltunes.errors import ConfigError, TunerUnavailable, field_errors
from oltunes.launchers.environment import Environment
from oltunes.lifeline import kill_with_me
from oltunes.tracking import Tracker
from oltunes.types import Variant, new_id

if TYPE_CHECKING:
    from oltunes.tuner.protocol import TunerLike

log = logging.getLogger(__name__)


def run_id() -> str:
    """This flow run's id as a job id (hex): a job without an id of its own is named after its Prefect run."""
    from prefect.runtime import flow_run

    return (flow_run.id or new_id()).replace("-", "")


def run_name(kind: str) -> Callable[[], str]:
    """Flow-run names that tell runs apart in the Prefect UI: ``<kind>-<families>-<job or service id>``."""

    def name() -> str:
        from prefect.runtime import flow_run

        p = flow_run.parameters
        models = p.get("models") or []
        families = p.get("family") or "+".join(str(m.get("family") if isinstance(m, dict) else getattr(m, "family", "?"))
                                               for m in models)  # fmt: skip
        return f"{kind}-{families or 'job'}-{p.get('job_id') or p.get('service_id') or run_id()[:8]}"

    return name


def validate(model: type[BaseModel], **params: Any) -> Any:
    """Validate flow parameters; the error names the parameter (fail fast, before any work starts)."""
    try:
        return model(**params)
    except ValidationError as e:  # names the parameter, never echoes its value (it may be megabytes)
        reasons = "; ".join(f"parameter {name!r}: {msg}" for name, msg in field_errors(e.errors()))
        raise ConfigError(reasons) from e


def check_family(family: str, variants: list[Variant], launcher: str) -> list[Variant]:
    """The family's variants in the environment's catalogue; an unknown family names the known ones."""
    known = sorted({v.family for v in variants})
    if family not in known:
        hint = "" if known else " (no variants: build the zoo with `oltunes zoo build`)"
        raise ConfigError(f"parameter 'family': unknown {family!r} for launcher {launcher!r}; known: {', '.join(known)}{hint}")
    return [v for v in variants if v.family == family]


def tuner_settings(env: Environment, settings: Settings | None = None) -> Settings:
    """The settings the environment's tuner learns under (its tuner state home)."""
    return env.tuner_settings(settings or get_settings())


def ran_policy(policy: str, advisory: bool) -> str:
    """The policy whose decisions really run: ``policy``, except that advisory mode never runs the tuner (its
    ``oltunes`` runs `ADVISORY_BASELINE`); tagged ``policy`` in MLflow."""
    from oltunes.tuner.advisory import ADVISORY_BASELINE

    return ADVISORY_BASELINE if advisory and policy == "oltunes" else policy


def make_tuner(env: Environment, variants: list[Variant], policy: str = "oltunes",
               advisory: bool = False) -> tuple[TunerLike, Settings]:  # fmt: skip
    """The flow's tuner and the settings it learns under: for ``oltunes`` the configured tuner itself (its saved
    state, or the tuning service: `get_tuner`); for any other ``policy`` name that placement policy
    (``Policy.make``, with the environment's public profile table if it has one) behind the same interface.
    ``advisory``: the configured tuner decides and learns, `ran_policy` places (`oltunes.tuner.advisory`)."""
    from oltunes.policies import Policy
    from oltunes.tuner.advisory import AdvisoryTuner, baseline_policy
    from oltunes.tuner.factory import get_tuner
    from oltunes.tuner.local import StateFileTuner

    Policy.lookup(policy)  # an unknown name fails here, listing the known ones
    s = tuner_settings(env)
    if advisory:
        baseline = baseline_policy(ran_policy(policy, advisory), variants, env.profile(s))
        tuner = make_tuner(env, variants)[0]
        predict = tuner.tuner.predict if isinstance(tuner, StateFileTuner) else None  # a client predicts nothing
        return AdvisoryTuner(tuner, baseline, predict=predict), s
    if policy != "oltunes":
        return baseline_policy(policy, variants, env.profile(s)), s
    tuner = get_tuner(s, variants=variants)
    try:  # a tuner restored from its saved state learns of variants built since
        tuner.add_variants(variants)
    except TunerUnavailable as e:  # a remote tuner that is down: its fallback already knows the variants
        log.warning("could not register variants with the tuning service: %s", e)
    return tuner, s


def make_tracker() -> Tracker:
    return Tracker()


# How Prefect 3.8 runs its ephemeral API (prefect/server/api/server.py, SubprocessASGIServer): a plain
# `python -m uvicorn --factory prefect.server.api.server:create_app` child of the first process that needs an API,
# stopped only by an atexit hook, so a SIGKILLed flow process leaves it running. Prefect offers no hook to set a
# parent-death signal in that child, so the flow hands it to a keeper that stops it when this process dies.
PREFECT_EPHEMERAL_APP = "prefect.server.api.server:create_app"


def bind_ephemeral_api() -> list[int]:
    """Make the ephemeral Prefect API server this process started (if any) die with it; returns its pid(s)."""
    import psutil

    bound = []
    for child in psutil.Process().children():
        try:
            if PREFECT_EPHEMERAL_APP in child.cmdline() and kill_with_me(child.pid):
                bound.append(child.pid)
        except psutil.Error:  # exited meanwhile
            continue
    return bound
