"""What `oltunes services` reads: one record per running streaming service, its published address and endpoints."""

from __future__ import annotations

import json
import socket
import subprocess

from typer.testing import CliRunner

from oltunes.cli import app
from oltunes.launchers.service_records import ServiceRecord, published_url, read_records, remove_record, write_record


def test_a_wildcard_bind_is_published_as_this_hosts_name():
    assert published_url("127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert published_url("0.0.0.0", 8080) == f"http://{socket.getfqdn()}:8080"
    assert published_url("::1", 9) == "http://[::1]:9"


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_records_round_trip_and_a_killed_services_record_is_told_apart(oltunes_home):
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    live = ServiceRecord(service_id="svc-a", url=f"http://127.0.0.1:{closed_port}", models=["cnn", "mlp"], launcher="local")
    dead = ServiceRecord(service_id="svc-b", url="http://127.0.0.1:1", models=["cnn"], launcher="local", pid=_dead_pid())
    write_record(oltunes_home, live)
    write_record(oltunes_home, dead)
    (oltunes_home / "services" / "torn.json").write_text("{")  # a damaged file is skipped, not fatal
    assert {r.service_id for r in read_records(oltunes_home)} == {"svc-a", "svc-b"}
    assert live.alive() is True and dead.alive() is False
    assert live.endpoints["mlp infer"] == f"{live.url}/v2/models/mlp/infer"

    shown = CliRunner().invoke(app, ["services", "--json"])
    assert shown.exit_code == 0, shown.output
    rows = [json.loads(line) for line in shown.output.splitlines() if line.startswith("{")]
    assert [(r["service_id"], r["state"]) for r in rows] == [("svc-a", "unreachable")]  # nothing listens there
    rows = [json.loads(line) for line in CliRunner().invoke(app, ["services", "--json", "--all"]).output.splitlines()
            if line.startswith("{")]
    assert {r["service_id"]: r["state"] for r in rows} == {"svc-a": "unreachable", "svc-b": "stopped"}
    table = CliRunner().invoke(app, ["services"])
    assert "svc-a" in table.output and "/v2/models/cnn/infer" in table.output

    remove_record(oltunes_home, "svc-a")
    remove_record(oltunes_home, "svc-b")
    assert read_records(oltunes_home) == []
    assert "no streaming service is running" in CliRunner().invoke(app, ["services"]).output


def test_the_cli_still_loads_without_flow_dependencies():
    """The worker image runs `oltunes worker` with no pandas, Prefect or launchers: the CLI must not import them."""
    import sys

    code = ("import sys, oltunes.cli; "
            "print([m for m in sys.modules if m.startswith(('oltunes.launchers', 'pandas', 'prefect', 'httpx'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
