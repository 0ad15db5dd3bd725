"""`oltunes services`: the streaming services running from this OLTunes home, their addresses and endpoints.

Each streaming flow records its address when its gateway listens and removes the record when it stops
(`oltunes.launchers.service_records`); this command reads those records and asks each gateway whether it is ready.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from oltunes.cli.tables import print_table
from oltunes.config import get_settings

if TYPE_CHECKING:  # imported when the command runs: the worker image's CLI has no flow dependencies
    from oltunes.launchers.service_records import ServiceRecord


def probe(rec: ServiceRecord, timeout_s: float = 2.0) -> str:
    """``serving`` (its gateway says ready), ``starting`` (it answers, not ready yet), ``unreachable`` (no answer
    from here), or ``stopped`` (its flow process is gone: a record left by a killed run)."""
    import httpx

    if rec.alive() is False:
        return "stopped"
    try:
        r = httpx.get(f"{rec.url}/v2/health/ready", timeout=timeout_s)
    except httpx.HTTPError:
        return "unreachable"
    return "serving" if r.status_code == 200 else "starting"


def services(
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per line, one line per service")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="also records whose flow process is gone")] = False,
) -> None:
    """List the running streaming services: address, state, models and every endpoint clients use."""
    from oltunes.launchers.service_records import read_records

    found = [(rec, probe(rec)) for rec in read_records(get_settings().home)]
    found = [(rec, state) for rec, state in found if show_all or state != "stopped"]
    if json_out:
        for rec, state in found:
            typer.echo(json.dumps({"service_id": rec.service_id, "state": state, "url": rec.url, "models": rec.models,
                                   "launcher": rec.launcher, "host": rec.host, "pid": rec.pid, "started": rec.started,
                                   "flow_run_id": rec.flow_run_id, "endpoints": rec.endpoints}))  # fmt: skip
        return
    out = Console()
    if not found:
        Console(stderr=True).print("no streaming service is running (start one: `prefect deployment run "
                                   "streaming-inference/streaming-service`, or the streaming flow)")  # fmt: skip
        return
    rows = [(r.service_id, state, r.url, ", ".join(r.models), r.launcher, r.started) for r, state in found]
    print_table(out, "streaming services", ("service", "state", "address", "models", "launcher", "started"), rows)
    for rec, _ in found:
        print_table(out, f"{rec.service_id} endpoints", ("endpoint", "address"), rec.endpoints.items())


def register(root: typer.Typer) -> None:
    """Attach the services command to the root CLI."""
    root.command("services")(services)
