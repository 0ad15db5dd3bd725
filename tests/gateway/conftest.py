"""A real gateway process in front of a real worker, shared by the conformance and property tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from oltunes.worker import serve_process


@pytest.fixture(scope="module")
def served(built_zoo):
    """(gateway address, worker address, the variant's path): a gateway process routing 'cnn' to one worker."""
    path = built_zoo / "models" / "cnn-s-fp32.onnx"
    with serve_process(path, model_name="cnn", max_delay_ms=1.0) as worker:
        proc = subprocess.Popen([sys.executable, "-m", "oltunes.gateway", "--route", f"cnn={worker.url}"], stdout=subprocess.PIPE, text=True)
        try:
            url = proc.stdout.readline().strip() if proc.stdout else ""
            assert url.startswith("http"), "the gateway did not start"
            yield url.removeprefix("http://"), worker.url.removeprefix("http://"), path
        finally:
            proc.terminate()
            proc.wait(30)
