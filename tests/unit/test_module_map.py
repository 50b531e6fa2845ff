"""The module map (docs/modules.md) is generated from the layer contract, and never out of date.

``scripts/module_map.py`` renders it from ``LAYERS`` in test_layers.py; a
module added, moved, split or re-documented without ``make modules`` fails here.
"""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_map_has_every_module_and_every_layer(script: ModuleType, rendered: str) -> None:
    text = rendered
    for path in sorted((ROOT / "grader").rglob("*.py")):
        assert f"| `{path.relative_to(ROOT)}` |" in text, f"{path.relative_to(ROOT)} has no row in the module map"
    contract = script.load_contract()
    for i, layer in enumerate(contract.LAYERS):
        assert f"\n| {i} | " in text, f"layer {i} ({sorted(layer)}) is missing from the map"


def test_a_module_out_of_the_contract_is_shown_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The map renders what the contract says, not a list of its own: a module in no layer is marked."""
    script = _script()
    contract = script.load_contract()
    placed = {m for layer in contract.LAYERS for m in layer}
    shrunk = tuple(frozenset(layer - {"core.policy"}) for layer in contract.LAYERS)
    assert "core.policy" in placed
    monkeypatch.setattr(script, "load_contract", lambda: _with(contract, LAYERS=shrunk))
    assert "| **none** | `grader/core/policy.py` |" in script.render()


def _with(module: ModuleType, **changes: object) -> ModuleType:
    copy = ModuleType(module.__name__)
    copy.__dict__.update(module.__dict__)
    copy.__dict__.update(changes)
    return copy
