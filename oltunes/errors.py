"""One root exception; subclasses say which part failed and what to do about it."""

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


def invalid(e: ValidationError, context: str) -> ConfigError:
    """A pydantic error as one ConfigError that names every bad field: ``<context>: field 'a.b': msg; ...``."""
    reasons = "; ".join(
        f"field {'.'.join(map(str, err['loc'])) or '(top level)'!r}: {err['msg']}" for err in e.errors()
    )
    return ConfigError(f"{context}: {reasons}")
