"""The MLflow boundary: open a client safely and turn third-party errors into OLTunes errors.

Two kinds of failure matter to a caller that must not lose a record:

- `TrackingUnavailable`: MLflow could not be reached or could not answer now (connection refused, timeout, a 5xx,
  a locked database). Retrying later may succeed: the record waits in the disk buffer.
- `RecordRejected`: MLflow answered, and the answer is about *this* record (invalid parameter, bad request, the
  run it names is gone). Retrying cannot help: the record goes to the dead-letter folder with the reason.

Anything we cannot classify counts as unavailable: keeping a record buffered is safer than dead-lettering it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from oltunes.errors import OLTunesError


class TrackingUnavailable(OLTunesError):
    """MLflow could not be reached or answer now (reads fail with this; writes wait in the disk buffer)."""


class RecordRejected(OLTunesError):
    """MLflow answered with an error about this record; it will not land by retrying (it is dead-lettered)."""


# MLflow error codes that describe the request, not the server's health (see mlflow/exceptions.py).
_REJECTING = frozenset(
    {"INVALID_PARAMETER_VALUE", "BAD_REQUEST", "RESOURCE_DOES_NOT_EXIST", "RESOURCE_ALREADY_EXISTS", "INVALID_STATE"}
)


def _third_party_errors() -> tuple[type[BaseException], ...]:
    import requests
    import sqlalchemy.exc
    from alembic.util.exc import CommandError
    from mlflow.exceptions import MlflowException

    return (MlflowException, requests.RequestException, sqlalchemy.exc.SQLAlchemyError, CommandError, OSError)


def _short(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + "…"


def translate(e: BaseException, uri: str) -> OLTunesError:
    """The OLTunes error for a third-party exception raised while talking to MLflow at `uri`."""
    from mlflow.exceptions import MlflowException

    if isinstance(e, MlflowException) and e.error_code in _REJECTING:
        return RecordRejected(f"MLflow at {uri} rejected the record ({e.error_code}): {_short(e.message)}")
    return TrackingUnavailable(f"MLflow at {uri} is unreachable or failing ({type(e).__name__}: {_short(e)})")


@contextlib.contextmanager
def mlflow_errors(uri: str) -> Iterator[None]:
    """Run MLflow calls; third-party errors leave as `TrackingUnavailable` or `RecordRejected`."""
    try:
        yield
    except OLTunesError:
        raise
    except _third_party_errors() as e:
        raise translate(e, uri) from e


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock held by this process until the block ends (released on crash, too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def open_client(uri: str) -> Any:
    """An `MlflowClient` for `uri` whose stores are initialised.

    A fresh SQLite store is created by MLflow's alembic migrations on first use; two processes doing that at
    once on one file fail (``CommandError``). Initialisation is therefore serialised by a lock file beside the
    database; later opens find the schema in place and only take the lock briefly.
    """
    from mlflow import MlflowClient

    if uri.startswith("http"):
        # MLflow's default is 7 retries with exponential back-off (minutes); a flow must not stall on that.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    db = sqlite_path(uri)
    with mlflow_errors(uri):
        if db is None:
            return MlflowClient(tracking_uri=uri, registry_uri=uri)
        with file_lock(db.with_name(db.name + ".init.lock")):
            client = MlflowClient(tracking_uri=uri, registry_uri=uri)
            client.search_experiments(max_results=1)  # tracking store: creates/migrates the schema
            client.search_registered_models(max_results=1)  # registry store: same file, same migrations
        return client
