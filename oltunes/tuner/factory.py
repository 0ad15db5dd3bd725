"""`get_tuner(settings)`: the in-process tuner bound to its state file (`StateFileTuner`) by default, the HTTP
`TunerClient` when ``tuner_url`` is set.

Callers (flows, the simulator's ``oltunes`` policy, the CLI) code against `oltunes.tuner.protocol.TunerLike` and
never care which one they hold: moving the tuner into a service is one setting, ``OLTUNES_TUNER_URL=http://host:port``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oltunes.config import Settings, get_settings
from oltunes.errors import ConfigError
from oltunes.tuner.protocol import TunerLike
from oltunes.types import Variant

__all__ = ["TunerLike", "get_tuner"]


def get_tuner(
    settings: Settings | None = None,
    *,
    variants: Iterable[Variant] | None = None,
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
    **tuner_kwargs
        Passed to ``Tuner(...)`` when a fresh in-process tuner is built (batch_sizes, concurrencies, prior, seed).
    """
    settings = settings or get_settings()
    if settings.tuner_url:
        from oltunes.client.tuner_client import TunerClient

        token = settings.tuner_token.get_secret_value() if settings.tuner_token else None
        return TunerClient(
            settings.tuner_url,
            token=token,
            timeout_s=settings.tuner_timeout_s,
            outbox_dir=settings.buffer_dir / "tuner-outbox",
            variants=variants or (),
        )

    from oltunes.tuner.tuner import Tuner
    from oltunes.tuner.local import StateFileTuner

    path = settings.tuner_state_path
    tuner_kwargs.setdefault("seed", settings.seed)

    def new() -> Tuner:
        if variants is None:
            raise ConfigError(
                f"variants: required to build a new in-process tuner (no saved state at {path}); "
                "pass the zoo's variants, or set OLTUNES_TUNER_URL to use a running tuning service"
            )
        return Tuner(list(variants), **tuner_kwargs)

    return StateFileTuner.open(path, new)
