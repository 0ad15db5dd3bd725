"""`oltunes tuner` commands: serve the tuner over HTTP, ask it for one decision, flush the client's outbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape

from oltunes.errors import ConfigError, OLTunesError, invalid
from oltunes.types import ClusterState, JobSpec, Variant

tuner_app = typer.Typer(no_args_is_help=True, help="The tuning service (FM-FTML tuner) and its client.")
err = Console(stderr=True)


def _read_json(path: Path, what: str) -> Any:
    """A JSON file, or YAML (a superset of JSON: the job template's comments included)."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what}: file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{what}: {path} is neither JSON nor YAML: {e}") from e


def load_variants(path: Path) -> list[Variant]:
    """Variants from a JSON file: a list of Variant objects, ``{"variants": [...]}``, or JSON lines.

    The output of ``oltunes zoo list --json`` is accepted too (its ``variant`` key is the Variant's ``name``;
    keys a Variant does not have are ignored).
    """
    text = path.read_text() if path.exists() else None
    if text is None:
        raise ConfigError(f"--variants: file not found: {path}")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise ConfigError(f"--variants: {path} is neither JSON nor JSON lines: {e}") from e
    if isinstance(data, dict):
        data = data.get("variants", data)
    if not isinstance(data, list):
        raise ConfigError(f"--variants: {path} must hold a list of variants")
    fields = set(Variant.model_fields)
    rows = []
    for row in data:
        if isinstance(row, dict):
            row = dict(row)
            if "name" not in row and "variant" in row:
                row["name"] = row.pop("variant")
            row = {k: v for k, v in row.items() if k in fields}
        rows.append(row)
    try:
        return TypeAdapter(list[Variant]).validate_python(rows)
    except ValidationError as e:
        raise invalid(e, f"--variants: {path}") from e


def _build_tuner(state: Path, variants_path: Path | None):
    from oltunes.tuner.tuner import Tuner

    if state.exists():
        try:
            return Tuner.load(state)
        except OLTunesError:
            raise
        except Exception as e:  # a corrupt file must stop the start-up, never be overwritten silently
            raise ConfigError(
                f"--state: cannot restore {state}: {type(e).__name__}: {e}; move it away to start fresh"
            ) from e
    if variants_path is not None:
        return Tuner(load_variants(variants_path))
    from oltunes.zoo import (
        list_variants,  # the built zoo is the default catalogue (imports torch: only here)
    )

    zoo = list_variants()
    if not zoo:
        raise ConfigError(
            f"--variants: no saved state at {state} and the model zoo is empty: run `oltunes zoo build` "
            "or pass --variants FILE (e.g. the output of `oltunes zoo list --json`)"
        )
    return Tuner(zoo)


@tuner_app.command("serve")
def serve_cmd(
    host: Annotated[str, typer.Option(help="address to bind; non-loopback needs OLTUNES_TUNER_TOKEN")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8765,
    inventory: Annotated[Path | None, typer.Option(help="pools YAML: the cluster for requests that omit one")] = None,
    state: Annotated[Path | None, typer.Option(help="tuner state JSON (default: settings.tuner_state_path)")] = None,
    variants: Annotated[
        Path | None, typer.Option(help="variants JSON for a fresh tuner (default: the built zoo)")
    ] = None,
    persist_every: Annotated[float, typer.Option(min=0, help="seconds between state saves (0: on exit only)")] = 30.0,
    log_level: Annotated[str, typer.Option()] = "info",
    queue_policy: Annotated[str, typer.Option(help="order of the lease queue (a QueuePolicy name)")] = "fcfs",
    queue_policy_weights: Annotated[Path | None, typer.Option(
        help="weights file of --queue-policy rltune (from `oltunes rltune train`)")] = None,
    class_limit: Annotated[list[str] | None, typer.Option(
        help="ACCELERATOR=N: at most N leased jobs of that class per host, e.g. t4=2 (repeatable)")] = None,
    advisory: Annotated[bool, typer.Option(
        "--advisory", help="advisory mode: answers place jobs as least-loaded would, the tuner's choice as advice")
    ] = False,
) -> None:
    """Serve the tuner over HTTP (routes under /v1: recommend, expect, observe, health, state, variants; with
    --inventory also leases: the service allocates those pools)."""
    from oltunes.config import get_settings
    from oltunes.inventory import load_inventory
    from oltunes.netaddr import check_bind
    from oltunes.service.app import serve

    settings = get_settings()
    token = settings.tuner_token.get_secret_value() if settings.tuner_token else None
    state_path = state or settings.tuner_state_path
    try:
        # before the (possibly slow) state load
        check_bind(host, token, service="tuner", token_setting="OLTUNES_TUNER_TOKEN")
        pools = load_inventory(inventory) if inventory else None
        limits = _class_limits(class_limit or [])
        policy = _queue_policy(queue_policy, queue_policy_weights)
        tuner = _build_tuner(state_path, variants)
    except OLTunesError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    err.print(f"tuner: serving on http://{host}:{port}/v1 (auth {'on' if token else 'off'}), state {state_path}"
              + (", ADVISORY (clients run the least-loaded baseline)" if advisory else ""))
    try:  # replaying the observe journal can still refuse a corrupt file
        serve(tuner, host=host, port=port, token=token, state_path=state_path, pools=pools,
              persist_every_s=persist_every, log_level=log_level, queue_policy=policy, class_limits=limits,
              advisory=advisory)
    except OLTunesError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from None


def _queue_policy(name: str, weights: Path | None):
    """The lease queue's policy, built once at start-up (a bad name or weights file stops the start, naming the
    option; the file's contents are never echoed)."""
    from oltunes.rltune.policies import QueuePolicy, queue_policy

    if name not in QueuePolicy.known():
        raise ConfigError(f"--queue-policy: unknown policy; known: {', '.join(sorted(QueuePolicy.known()))}")
    if (weights is None) != (name != "rltune"):
        raise ConfigError("--queue-policy-weights: required with --queue-policy rltune, and only with it")
    if weights is not None and not weights.is_file():
        raise ConfigError(f"--queue-policy-weights: file not found: {weights}")
    try:
        return queue_policy(name, weights)
    except OLTunesError as e:
        raise ConfigError(f"--queue-policy-weights: {e}") from None


def _class_limits(items: list[str]) -> dict[str, int]:
    limits = {}
    for item in items:
        name, _, n = item.partition("=")
        if not name or not n.isdigit():
            raise ConfigError("--class-limit: expected ACCELERATOR=N with N an integer >= 0, e.g. t4=2")
        limits[name] = int(n)
    return limits


@tuner_app.command("recommend")
def recommend_cmd(
    job: Annotated[Path, typer.Option(help="JobSpec file, JSON or YAML (`oltunes tuner job-template` writes one)")],
    cluster: Annotated[Path | None, typer.Option(help="ClusterState JSON file")] = None,
    inventory: Annotated[Path | None, typer.Option(help="pools YAML (an empty cluster) instead of --cluster")] = None,
    variants: Annotated[
        Path | None, typer.Option(help="variants JSON (fresh in-process tuner / client fallback)")
    ] = None,
) -> None:
    """Print one Decision as JSON, from the tuner the settings select (in-process, or OLTUNES_TUNER_URL). Against
    a running service (OLTUNES_TUNER_URL) without --cluster/--inventory, the service's own inventory is used.
    How to read the decision's explanation: docs/decisions.md."""
    from oltunes.config import get_settings
    from oltunes.inventory import load_inventory
    from oltunes.tuner.factory import get_tuner

    try:
        job_spec = JobSpec.model_validate(_read_json(job, "--job"))
        if cluster is not None:
            state: ClusterState | None = ClusterState.model_validate(_read_json(cluster, "--cluster"))
        elif inventory is not None:
            state = ClusterState(pools=load_inventory(inventory))
        elif get_settings().tuner_url:
            state = None  # the service's inventory (`oltunes tuner serve --inventory`)
        else:
            raise ConfigError("--cluster or --inventory: one is required without a tuning service "
                              "(OLTUNES_TUNER_URL: a service started with --inventory uses its own)")
        tuner = get_tuner(variants=load_variants(variants) if variants else None)
        decision = tuner.decide(job_spec, state)
    except ValidationError as e:
        err.print(f"[red]error:[/red] {escape(str(invalid(e, '--job')))}")
        raise typer.Exit(2) from None
    except OLTunesError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    typer.echo(decision.model_dump_json(indent=2))



@tuner_app.command("job-template")
def job_template_cmd() -> None:
    """Print a JobSpec to fill in, every field with a comment (YAML; `recommend --job` reads it as it is)."""
    from oltunes.cli.job_template import job_template

    typer.echo(job_template(), nl=False)


@tuner_app.command("flush")
def flush_cmd() -> None:
    """Send the measurements the HTTP client queued while the service was unreachable."""
    from oltunes.config import get_settings
    from oltunes.client.tuner_client import TunerClient

    settings = get_settings()
    if not settings.tuner_url:
        err.print("[red]error:[/red] OLTUNES_TUNER_URL is not set: there is no service to flush to")
        raise typer.Exit(2)
    token = settings.tuner_token.get_secret_value() if settings.tuner_token else None
    with TunerClient(settings.tuner_url, token=token, retry_after_s=0) as client:
        try:
            sent = client.flush()
        except OLTunesError as e:
            err.print(f"[red]error:[/red] {escape(str(e))}")
            raise typer.Exit(2) from None
        left = client.pending
    typer.echo(json.dumps({"sent": sent, "pending": left}))
    if left:
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    """Attach ``oltunes tuner ...`` to the root CLI."""
    root.add_typer(tuner_app, name="tuner")
