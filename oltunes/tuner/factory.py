"""`get_tuner(settings)`: the in-process `Tuner` by default, the HTTP `TunerClient` when ``tuner_url`` is set.

Callers (flows, the simulator's ``oltunes`` policy, the CLI) code against `TunerLike` and never care which one
they hold: moving the tuner into a service is one setting, ``OLTUNES_TUNER_URL=http://host:port``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from oltunes.config import Settings, get_settings
from oltunes.errors import ConfigError
from oltunes.types import ClusterState, Decision, JobSpec, Measurement, Placement, Variant


@runtime_checkable
class TunerLike(Protocol):
    """The ask/tell interface shared by `oltunes.tuner.Tuner` and `oltunes.tuner.client.TunerClient`."""

    def decide(self, job: JobSpec, cluster: ClusterState, current: Placement | None = None) -> Decision: ...

    def recommend(self, job: JobSpec, cluster: ClusterState, *, current: Placement | None = None) -> Decision: ...

    def observe(self, m: Measurement) -> bool: ...

    def replay(self, measurements: Iterable[Measurement]) -> int: ...


def get_tuner(
    settings: Settings | None = None,
    *,
    variants: Iterable[Variant] | None = None,
    load_state: bool = True,
    **tuner_kwargs: Any,
) -> TunerLike:
    """Build the tuner the settings ask for.

    Parameters
    ----------
    settings
        Default: `get_settings()`.
    variants
        The servable variants. In-process: the tuner's variants when no saved state exists. HTTP: known to the
        client's fallback decision (the service's own list is cached on first contact too).
    load_state
        In-process only: bind the tuner to ``settings.tuner_state_path`` (restored when it exists): a
        `LocalTuner`, whose ``save()`` merges with what concurrent processes saved there. False: a fresh `Tuner`.
    **tuner_kwargs
        Passed to ``Tuner(...)`` when a fresh in-process tuner is built (batch_sizes, concurrencies, prior, seed).
    """
    settings = settings or get_settings()
    if settings.tuner_url:
        from oltunes.tuner.client import TunerClient

        token = settings.tuner_token.get_secret_value() if settings.tuner_token else None
        return TunerClient(
            settings.tuner_url,
            token=token,
            timeout_s=settings.tuner_timeout_s,
            outbox_dir=settings.buffer_dir / "tuner-outbox",
            variants=variants or (),
        )

    from oltunes.tuner.core import Tuner
    from oltunes.tuner.local import LocalTuner

    path = settings.tuner_state_path
    tuner_kwargs.setdefault("seed", settings.seed)

    def new() -> Tuner:
        if variants is None:
            raise ConfigError(
                f"variants: required to build a new in-process tuner (no saved state at {path}); "
                "pass the zoo's variants, or set OLTUNES_TUNER_URL to use a running tuning service"
            )
        return Tuner(list(variants), **tuner_kwargs)

    return LocalTuner.open(path, new) if load_state else new()
