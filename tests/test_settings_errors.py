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


# Issue 31 case 8: paths, infinities and tokens too (each used to be a traceback, exit 1, or silently the cwd).
@pytest.mark.parametrize("var,value", [
    ("OLTUNES_TUNER_TIMEOUT_S", "inf"), ("OLTUNES_TUNER_TIMEOUT_S", "nan"), ("OLTUNES_CPU_WATTS_PER_CORE", "1e400"),
    ("OLTUNES_HOME", "/proc/nonexistent/x"), ("OLTUNES_HOME", ""), ("OLTUNES_HOME", "   "),
    ("OLTUNES_TUNER_TOKEN", "   "), ("OLTUNES_TUNER_TOKEN", "two words"), ("OLTUNES_GATEWAY_TOKEN", "\t"),
    ("OLTUNES_TUNER_URL", "ftp://somewhere"), ("OLTUNES_SEED", "-1"),
])
def test_every_setting_is_validated_with_one_line_naming_it(var, value, tmp_path):
    env = {**os.environ, "OLTUNES_HOME": str(tmp_path / "home"), var: value}
    argv = ["-c", "from oltunes.cli import app; app()", "tuner", "serve", "--host", "0.0.0.0", "--port", "1"]
    r = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and var in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert value.strip() == "" or value not in lines[0]  # the value itself is never echoed


def test_a_home_that_cannot_be_created_is_refused_before_anything_runs(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("OLTUNES_HOME", str(tmp_path / "file" / "home"))
    with pytest.raises(ConfigError, match="OLTUNES_HOME.*cannot create"):
        Settings()
