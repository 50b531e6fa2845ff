"""Every test module's name is unique under tests/: the suite has no packages (no ``__init__.py``), so pytest
imports each module by its basename, and a second ``test_x.py`` elsewhere is an import error at collection
(a unit and an integration ``test_seats.py`` once failed a whole CI run that way)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if "__pycache__" not in path.parts:
            where[path.name].append(str(path.relative_to(TESTS)))
    assert not (TESTS / "__init__.py").exists(), "tests/ became a package: this check is then too strict"
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert twice == {}, f"rename one of each (integration modules end in _docker): {twice}"
