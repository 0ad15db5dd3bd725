"""The README's production section, run exactly as written: a Prefect server on loopback, `infra/deploy.sh`
(pools, zoo, batch input, `prefect deploy --all`), a process worker, the batch deployment to Completed, then the
worker stopped with SIGINT before the server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from oltunes.netaddr import free_port

pytestmark = pytest.mark.slow


def production_script(readme: Path) -> str:
    m = re.search(r"<!-- production-script:begin -->\s*```bash\n(.*?)```\s*<!-- production-script:end -->", readme.read_text(), re.S)
    assert m, "README.md has no production script block"
    return m.group(1)


def processes_of(port: int) -> list[psutil.Process]:
    """Processes the script left behind (identified by the port in their environment)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("OLTUNES_PREFECT_PORT") == str(port) and p.pid != os.getpid():
                p.info_name = " ".join(p.cmdline()[:4])  # read now: it may be gone when reported
                found.append(p)
        except psutil.Error:
            continue
    return found


def stop_leftovers(port: int) -> list[str]:
    """If the script failed half-way: workers with SIGINT first, then the rest; returns what was left."""
    left = processes_of(port)
    for sig, match in ((signal.SIGINT, "worker"), (signal.SIGTERM, "")):
        for p in left:
            try:
                if match in " ".join(p.cmdline()):
                    p.send_signal(sig)
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=20)
    for p in processes_of(port):
        p.kill()
    return [f"pid {p.pid} ({p.info_name})" for p in left]


@pytest.mark.timeout(1800)  # a Prefect server, a deployment and a flow run on a loaded 2-core machine
def test_the_readme_production_script_runs_the_batch_deployment_to_completed(repo_root, built_zoo, tmp_path):
    import shutil

    script = production_script(repo_root / "README.md")
    home = tmp_path / "home"
    shutil.copytree(built_zoo, home / "zoo")  # the script's `oltunes zoo build` finds it cached
    port = free_port()
    env = {
        **os.environ,
        "OLTUNES_HOME": str(home),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "OLTUNES_PREFECT_PORT": str(port),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("PREFECT_API_URL", None)
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=repo_root, env=env, capture_output=True, text=True,
            timeout=1500,
        )
    finally:
        leftovers = stop_leftovers(port)
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((home / "logs").glob("*.log")))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + logs
    assert leftovers == []  # the script itself stopped the worker and the server
    assert "finished successfully in 'Completed'" in r.stdout
    print(f"production script: {time.monotonic() - t0:.0f} s")

    # The deployment's run read the input deploy.sh wrote and wrote every row once.
    items = pq.read_metadata(home / "data" / "batch" / "input.parquet").num_rows
    shards = list((home / "outputs").glob("*/worker-*/part-*.parquet"))
    assert shards and sum(pq.read_metadata(s).num_rows for s in shards) == items
    # It ran from a clone under OLTUNES_HOME, not from this checkout, and left no clone in the repository.
    (clone,) = [d for d in (home / "flow-runs").iterdir() if (d / ".git").exists()]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root, capture_output=True, text=True).stdout
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout == head
    assert subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo_root,
                          capture_output=True, text=True).stdout.count("flow-runs") == 0
    # Its measurement is in MLflow.
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert any(r.data.params.get("launcher") == "local" and r.info.status == "FINISHED" for r in runs)
