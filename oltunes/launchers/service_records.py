"""Where running streaming services can be reached: one record per service, as `oltunes services` lists them.

A streaming flow writes ``<home>/services/<service_id>.json`` (atomically) once its gateway listens, and removes
it when the service stops. The record holds the address clients use (`published_url`: a wildcard bind such as
``0.0.0.0`` is published as this host's name), the models it serves, and the flow process's host and pid, so a
record left by a killed process is told apart from a live service (`ServiceRecord.alive`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

from oltunes.atomic import atomic_write_json

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def published_url(host: str, port: int) -> str:
    """The address a client uses for a gateway bound to ``host:port`` (a wildcard bind: this host's name)."""
    if host in WILDCARD_HOSTS:
        host = socket.getfqdn()
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{port}"


def endpoints(url: str, models: list[str]) -> dict[str, str]:
    """The Open Inference Protocol endpoints of a gateway at ``url`` serving ``models`` (plus Prometheus)."""
    out = {
        "live": f"{url}/v2/health/live",
        "ready": f"{url}/v2/health/ready",
        "metadata": f"{url}/v2",
        "metrics": f"{url}/metrics",
    }
    for m in models:
        out[f"{m} infer"] = f"{url}/v2/models/{m}/infer"
        out[f"{m} metadata"] = f"{url}/v2/models/{m}"
    return out


@dataclass(frozen=True)
class ServiceRecord:
    """One running streaming service: its id, its address and what it serves."""

    service_id: str
    url: str
    models: list[str]
    launcher: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    started: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    flow_run_id: str | None = None

    @property
    def endpoints(self) -> dict[str, str]:
        return endpoints(self.url, self.models)

    def alive(self) -> bool | None:
        """Whether its flow process still runs (None: it runs on another host, this one cannot tell)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's live process
            return True
        return True


def records_dir(home: Path) -> Path:
    return home / "services"


def write_record(home: Path, rec: ServiceRecord) -> Path:
    return atomic_write_json(records_dir(home) / f"{rec.service_id}.json", asdict(rec))


def remove_record(home: Path, service_id: str) -> None:
    (records_dir(home) / f"{service_id}.json").unlink(missing_ok=True)


def read_records(home: Path) -> list[ServiceRecord]:
    """Every record under ``home``, oldest first; an unreadable file (being replaced, or damaged) is skipped."""
    found = []
    for path in sorted(records_dir(home).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            found.append(ServiceRecord(**data))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(found, key=lambda r: r.started)
