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
