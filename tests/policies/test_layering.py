"""Layering: the simulator and the policies never import each other (``oltunes.simulation`` joins them)."""

from __future__ import annotations

import ast
from pathlib import Path

import oltunes

ROOT = Path(oltunes.__file__).parent


def _imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for f in sorted((ROOT / folder).glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        out[f.name] = names
    return out


def test_policies_do_not_import_the_simulator_and_the_simulator_not_the_policies():
    for folder, other in (("policies", "oltunes.sim"), ("sim", "oltunes.policies")):
        mods = _imports(folder)
        assert mods, folder
        for name, names in mods.items():
            bad = {n for n in names if n == other or n.startswith(other + ".")}
            assert not bad, f"oltunes/{folder}/{name} imports {bad}"


def test_the_lease_book_does_not_import_the_queue_policies():
    """The allocator takes its queue order from whoever builds it (the service); RLTune depends on it, not back."""
    mods = _imports("allocator")
    assert "book.py" in mods
    for name, names in mods.items():
        bad = {n for n in names if n.startswith("oltunes.rltune")}
        assert not bad, f"oltunes/allocator/{name} imports {bad}"


def test_flows_and_policies_reach_a_tuner_only_through_its_interface():
    """No probing for a wrapped object's ``policy``/``tuner``/``save``: callers use `TunerLike` as it is."""
    root = ROOT.parent
    for f in [*sorted((root / "flows").glob("*.py")), *sorted((root / "tasks").glob("*.py")),
              *sorted((ROOT / "policies").glob("*.py")), ROOT / "tracking" / "history.py"]:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"}:
                arg = node.args[1] if len(node.args) > 1 else None
                assert not (isinstance(arg, ast.Constant) and arg.value in {"policy", "tuner", "save", "replay",
                                                                              "add_variants", "predict", "expect"}), \
                    f"{f.relative_to(root)}:{node.lineno} probes {arg.value!r}"
