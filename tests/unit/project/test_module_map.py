"""The module map (docs/modules.md) is generated from the architecture's contracts, and never out of date.

``scripts/module_map.py`` renders it from ``[tool.importlinter]`` in pyproject.toml; a module or package
added, moved, split or re-documented without ``make modules`` fails here.
"""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return _script()


@pytest.fixture(scope="module")
def rendered(script: ModuleType) -> str:
    return str(script.render())


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_map_is_up_to_date(script: ModuleType, rendered: str) -> None:
    expected, path = rendered, script.OUT
    actual = path.read_text(encoding="utf-8") if path.is_file() else ""
    if actual != expected:
        diff = list(difflib.unified_diff(actual.splitlines(), expected.splitlines(), "committed", "generated", lineterm="", n=0))
        pytest.fail(f"docs/modules.md is out of date: run `make modules` (.venv/bin/python scripts/module_map.py)\n"
                    + "\n".join(diff[:40]) + ("\n..." if len(diff) > 40 else ""), pytrace=False)


def test_the_map_has_every_module_every_layer_and_every_contract(script: ModuleType, rendered: str) -> None:
    text = rendered
    for path in sorted((ROOT / "grader").rglob("*.py")):
        assert f"| `{path.relative_to(ROOT)}` |" in text, f"{path.relative_to(ROOT)} has no row in the module map"
    contracts = script.contracts()
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    for i, layer in enumerate(layers):
        assert f"\n| {len(layers) - i} | `{layer}` | " in text, f"layer {layer} is missing from the map"
    for contract in contracts:
        assert f"\n| {contract['name']} | `{contract['type']}` |" in text, f"contract {contract['id']} is missing"


def test_the_map_renders_the_contracts_not_a_list_of_its_own(script: ModuleType, rendered: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer added to the contract appears in the map; one removed disappears (the map reads pyproject.toml)."""
    contracts = script.contracts()
    changed = [dict(c, layers=[x for x in c["layers"] if x != "plumbing"]) if c["type"] == "layers" else c
               for c in contracts]
    monkeypatch.setattr(script, "contracts", lambda: changed)
    assert "| `plumbing` |" not in script.render()
    assert "| `plumbing` |" in rendered
