"""The worker runs in an image without the learner, the zoo builder or the orchestration stack (the `flows`/`zoo`
extras): its entry points must import with those packages absent."""

from __future__ import annotations

import subprocess
import sys

ABSENT = ("river", "torch", "sklearn", "prefect", "mlflow", "pandas", "scipy", "safetensors", "docker", "matplotlib")


def test_worker_entry_points_import_without_the_heavy_extras():
    code = (
        "import sys\n"
        f"for m in {ABSENT!r}: sys.modules[m] = None  # any import of them now fails\n"
        "import oltunes.cli, oltunes.worker.__main__, oltunes.worker.serve, oltunes.worker.batch\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
