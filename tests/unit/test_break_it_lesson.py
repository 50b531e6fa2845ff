"""Lesson 07 gives every level of the ladder its own ``%%attack`` cell.

Levels 4 to 7 once shared one cell whose number the learner changed, so each attack replaced the last one
written; the magic's line (``ctf.magic.parse_line``) is what picks the level, so it is what is read here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the 'lab' extra")

from grader.ctf.ladder import level, load_levels  # noqa: E402 - after the skip
from grader.ctf.magic import MAGIC_NAME, parse_line  # noqa: E402

LESSON = Path(__file__).resolve().parents[2] / "lessons" / "07-break-it-yourself" / "break-it.md"


def _attacked_levels() -> list[int]:
    cells = [c.source for c in jupytext.read(LESSON).cells if c.cell_type == "code"]
    lines = [src.splitlines()[0] for src in cells if src.startswith(f"%%{MAGIC_NAME}")]
    return [level(_key(parse_line(line.removeprefix(f"%%{MAGIC_NAME}")).level)).number for line in lines]


def _key(level: str) -> int | str:
    return int(level) if level.isdigit() else level


def test_every_level_has_exactly_one_attack_cell_in_ladder_order() -> None:
    assert _attacked_levels() == [lv.number for lv in load_levels()]
