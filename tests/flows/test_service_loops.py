"""The streaming flow has one control loop (`run_service`) for every environment: it drives the environment's
`Serving` and never branches on the environment's name."""

from __future__ import annotations

import ast
import inspect

import flows.streaming_inference as streaming
from oltunes.launchers.serving import Serving


def test_the_flow_module_has_one_loop_and_never_asks_which_environment_runs():
    tree = ast.parse(inspect.getsource(streaming))
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.While)]
    assert len(loops) == 1  # the control loop; there is no second copy of it
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"simulated", "SERVICE_LOOPS"}  # no `if simulated`, no loop picked by environment name
    assert set(inspect.signature(streaming.run_service).parameters) == {"svc", "serving", "first"}


def test_the_loop_uses_only_the_serving_interface():
    used = {n.attr for n in ast.walk(ast.parse(inspect.getsource(streaming))) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "serving"}  # fmt: skip
    interface = {name for name in vars(Serving) if not name.startswith("_")}
    assert used and used <= interface, used - interface
