"""All defaults in one place, validated when loaded.

Every runtime file (Prefect home, MLflow store, built models, tuner state, buffers) lives under
`Settings.home` — one git-ignored folder, moved with a single setting: ``OLTUNES_HOME``.
"""

from __future__ import annotations

import contextlib
import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from oltunes.errors import invalid

REPO_ROOT = Path(__file__).resolve().parent.parent

# Offline by default: no telemetry or analytics calls leave the machine.
OFFLINE_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}


class Settings(BaseSettings):
    """OLTunes settings; each field reads ``OLTUNES_<FIELD>`` from the environment."""

    model_config = SettingsConfigDict(env_prefix="OLTUNES_", extra="ignore")

    home: Path = Field(default=REPO_ROOT / ".oltunes", description="root of all runtime state")
    shared_data: Path = Field(default=REPO_ROOT.parent / "shared" / "data", description="public traces (read-only)")
    mlflow_tracking_uri: str | None = Field(default=None, description="default: SQLite file under home")
    tuner_url: str | None = Field(default=None, description="None = in-process tuner; else http://host:port")
    tuner_token: SecretStr | None = Field(default=None, description="bearer token for the tuning service")
    tuner_admin_token: SecretStr | None = Field(
        default=None, description="the tuning service's operator token: sees lease ids, may release any lease")
    gateway_token: SecretStr | None = Field(default=None, description="bearer token of streaming gateways (required off loopback)")
    tuner_timeout_s: float = Field(default=2.0, gt=0, le=3600, allow_inf_nan=False)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    cpu_watts_per_core: float = Field(default=15.0, gt=0, le=1000, allow_inf_nan=False,
                                      description="estimate used when no energy counter exists")
    worker_image: str = Field(default="oltunes-worker-cpu:latest", description="Docker launcher, CPU pools")
    worker_gpu_image: str = Field(default="oltunes-worker-gpu:0.1.0", description="Docker launcher, GPU pools")

    def __init__(self, **values: object) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:  # one line naming the variable, never a traceback of pydantic internals
            names = ", ".join(dict.fromkeys(f"OLTUNES_{str(err['loc'][0]).upper()}" for err in e.errors()
                                            if err.get("loc")))
            raise invalid(e, f"settings ({names or 'OLTUNES_*'})") from e

    @field_validator("home", "shared_data", "mlflow_tracking_uri", "tuner_url", "worker_image", "worker_gpu_image",
                     mode="before")
    @classmethod
    def _not_blank(cls, v: object) -> object:
        # An empty OLTUNES_HOME used to mean "the current directory", silently.
        if isinstance(v, str) and not v.strip():
            raise ValueError("must not be empty (unset it for the default)")
        return v

    @field_validator("home", "shared_data")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        return v.expanduser().resolve()

    @field_validator("home")
    @classmethod
    def _usable_home(cls, v: Path) -> Path:
        """Every runtime file goes under home: it must be a writable directory or one that can be created, checked
        now rather than as a traceback from whichever command first writes there. Nothing is left behind: the
        folders a missing home needs are made and removed again (commands create it when they write)."""
        missing = [p for p in (v, *v.parents) if not p.exists()]
        made = []
        try:
            for p in reversed(missing):
                p.mkdir()
                made.append(p)
        except OSError as e:
            raise ValueError(f"cannot create the directory ({e.strerror or type(e).__name__})") from None
        finally:
            for p in reversed(made):
                with contextlib.suppress(OSError):
                    p.rmdir()
        if not missing and not (v.is_dir() and os.access(v, os.W_OK | os.X_OK)):
            raise ValueError("not a writable directory")
        return v

    @field_validator("tuner_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.strip().startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (unset it for the in-process tuner)")
        return v.strip() if v is not None else v

    @field_validator("tuner_token", "tuner_admin_token", "gateway_token", mode="before")
    @classmethod
    def _token(cls, v: object) -> object:
        raw = v.get_secret_value() if isinstance(v, SecretStr) else v
        if isinstance(raw, str):
            if raw == "":
                return None  # set but empty: no token, as unset (a non-loopback bind then refuses to start)
            if not raw.strip():
                raise ValueError("is only whitespace (it would bind with auth on and then match nothing)")
            if any(c.isspace() or not c.isprintable() for c in raw):
                raise ValueError("must not contain whitespace or control characters (it goes in an HTTP header)")
        return v

    @property
    def zoo_dir(self) -> Path:
        return self.home / "zoo"

    @property
    def prefect_home(self) -> Path:
        return self.home / "prefect"

    @property
    def mlflow_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.home / 'mlflow.db'}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.home / "mlartifacts"

    @property
    def tuner_state_path(self) -> Path:
        return self.home / "tuner" / "state.json"

    @property
    def buffer_dir(self) -> Path:
        return self.home / "buffer"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def apply_offline_env() -> None:
    """Set the offline switches unless the user set them explicitly."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
