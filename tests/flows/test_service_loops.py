"""The streaming flow has one service loop per registered launcher environment (picked by its name, never by a flag)."""

from __future__ import annotations

from flows.streaming_inference import SERVICE_LOOPS, _serve_in_simulated_time, _serve_with_workers
from oltunes.launchers import Launcher
from oltunes.launchers.environment import Environment


def test_every_environment_has_a_service_loop():
    assert set(SERVICE_LOOPS) == set(Environment.known())
    for name in Launcher.known():
        env = Launcher.lookup(name).environment
        expected = _serve_in_simulated_time if env.simulated else _serve_with_workers
        assert SERVICE_LOOPS[env.name] is expected, name
