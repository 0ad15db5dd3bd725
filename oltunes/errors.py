"""One root exception; subclasses say which part failed and what to do about it."""

from typing import Any

from pydantic import ValidationError


class OLTunesError(Exception):
    """Root of every error OLTunes raises on purpose."""


class ConfigError(OLTunesError, ValueError):
    """A setting, inventory, scenario or parameter is invalid (the message names the field)."""


class ModelError(OLTunesError):
    """A model file is missing, corrupt, or does not match its input."""


class DataError(OLTunesError, ValueError):
    """An input dataset is missing, empty or has the wrong shape/dtype."""


class WorkerError(OLTunesError):
    """The inference worker failed to start, crashed, or reported an error."""


class InputRejected(OLTunesError, ValueError):
    """A worker refused its input or configuration (its exit code 2): it would fail the same way again, so it is
    never retried (unlike `WorkerError`, a crash or a hang, which resumes from the worker's shards)."""

    exit_code = 2  # what the worker CLI exits with on any OLTunesError (and click on a usage error)


class TunerUnavailable(OLTunesError):
    """The tuning service cannot be reached (the client falls back to a safe default)."""


class MissingDependency(OLTunesError):
    """Optional hardware or software (GPU, NVML, Docker engine) is not present on this machine."""


_MAX_NAME_CHARS = 64  # a field name longer than this is not one of ours: never echo it back
_MAX_MSG_CHARS = 200


def field_errors(errors: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(field path, message)`` per pydantic error, without the rejected input (``input``/``ctx`` are dropped,
    over-long path parts such as an unknown 1 MB key are replaced by their length)."""
    out = []
    for err in errors:
        parts = [p if len(p) <= _MAX_NAME_CHARS else f"<{len(p)} chars>" for p in map(str, err.get("loc", ()))]
        out.append((".".join(parts) or "(top level)", str(err.get("msg", ""))[:_MAX_MSG_CHARS]))
    return out


def invalid(e: ValidationError, context: str) -> ConfigError:
    """A pydantic error as one ConfigError that names every bad field: ``<context>: field 'a.b': msg; ...``."""
    reasons = "; ".join(f"field {field!r}: {msg}" for field, msg in field_errors(e.errors()))
    return ConfigError(f"{context}: {reasons}")
