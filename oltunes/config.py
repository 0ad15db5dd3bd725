"""All defaults in one place, validated when loaded.

Every runtime file (Prefect home, MLflow store, built models, tuner state, buffers) lives under
`Settings.home` — one git-ignored folder, moved with a single setting: ``OLTUNES_HOME``.
"""

from __future__ import annotations

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
    gateway_token: SecretStr | None = Field(default=None, description="bearer token of streaming gateways (required off loopback)")
    tuner_timeout_s: float = Field(default=2.0, gt=0)
    seed: int = 0
    cpu_watts_per_core: float = Field(default=15.0, gt=0, description="estimate used when no energy counter exists")
    worker_image: str = Field(default="oltunes-worker-cpu:latest", description="Docker launcher, CPU pools")
    worker_gpu_image: str = Field(default="oltunes-worker-gpu:0.1.0", description="Docker launcher, GPU pools")

    def __init__(self, **values: object) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:  # one line naming the variable, never a traceback of pydantic internals
            names = ", ".join(dict.fromkeys(f"OLTUNES_{str(err['loc'][0]).upper()}" for err in e.errors()
                                            if err.get("loc")))
            raise invalid(e, f"settings ({names or 'OLTUNES_*'})") from e

    @field_validator("home", "shared_data")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        return v.expanduser().resolve()

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
