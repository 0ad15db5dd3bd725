"""A bad OLTUNES_* setting is one line naming the variable (exit 2), from every command-line entry point."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from oltunes.config import Settings
from oltunes.errors import ConfigError

ENTRY_POINTS = [
    ["-c", "from oltunes.cli import app; app()", "tuner", "flush"],
    ["-c", "from oltunes.cli import app; app()", "zoo", "list"],
    ["-m", "oltunes.worker", "batch", "--model", "x.onnx", "--input", "x.npz", "--output", "out"],
]


@pytest.mark.parametrize("argv", ENTRY_POINTS, ids=["tuner-flush", "zoo-list", "worker"])
@pytest.mark.parametrize("var,value", [("OLTUNES_TUNER_TIMEOUT_S", "-1"), ("OLTUNES_SEED", "many")])
def test_bad_setting_is_one_line_naming_it(argv, var, value, tmp_path):
    env = {**os.environ, "OLTUNES_HOME": str(tmp_path), var: value}
    r = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and var in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_settings_error_is_a_config_error_naming_each_variable(monkeypatch):
    monkeypatch.setenv("OLTUNES_TUNER_TIMEOUT_S", "-1")
    monkeypatch.setenv("OLTUNES_CPU_WATTS_PER_CORE", "0")
    with pytest.raises(ConfigError, match="OLTUNES_TUNER_TIMEOUT_S.*OLTUNES_CPU_WATTS_PER_CORE"):
        Settings()
