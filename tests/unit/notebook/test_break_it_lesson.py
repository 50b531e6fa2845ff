"""Lesson 07 gives every level of the ladder its own ``%%attack`` cell.

Levels 4 to 7 once shared one cell whose number the learner changed, so each attack replaced the last one
written; the magic's line (``notebook.magic.parse_line``) is what picks the level, so it is what is read here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the 'lab' extra")

from grader.course.ladder import level, load_levels  # noqa: E402 - after the skip
from grader.notebook.magic import MAGIC_NAME, parse_line  # noqa: E402

LESSON = Path(__file__).resolve().parents[3] / "lessons" / "07-break-it-yourself" / "break-it.md"


def _attacked_levels() -> list[int]:
    cells = [c.source for c in jupytext.read(LESSON).cells if c.cell_type == "code"]
    lines = [src.splitlines()[0] for src in cells if src.startswith(f"%%{MAGIC_NAME}")]
    return [level(_key(parse_line(line.removeprefix(f"%%{MAGIC_NAME}")).level)).number for line in lines]


def _key(level: str) -> int | str:
    return int(level) if level.isdigit() else level


def test_every_level_has_exactly_one_attack_cell_in_ladder_order() -> None:
    assert _attacked_levels() == [lv.number for lv in load_levels()]


RANK = {"warm-up": 0, "one idea": 1, "two ideas": 2}  # the tags that measure ideas; "correctly scoped" and "capstone" do not


def test_the_idea_tags_never_fall_as_the_ladder_climbs() -> None:
    """Level 7 was tagged "one idea" after level 6's "two ideas": the ramp read backwards. Level numbers are progress
    ids (``ctf:l07-dns-tunnel``), so the fix is the tag, not the order."""
    ranks = [(lv.number, RANK[lv.difficulty]) for lv in load_levels() if lv.difficulty in RANK]
    falls = [(a, b) for (a, ra), (b, rb) in zip(ranks, ranks[1:]) if rb < ra]
    assert falls == [], f"a level tagged with fewer ideas than the one before it: {falls}"


def test_the_lesson_names_each_tag_s_levels_as_the_level_files_do() -> None:
    text = " ".join(LESSON.read_text(encoding="utf-8").split())
    said: dict[str, set[int]] = {}
    for tag, numbers in re.findall(r"\*(warm-up|one idea|two ideas|correctly scoped|capstone)\* [^(]*\(([^)]*)\)", text):
        spans = [range(int(a), int(b) + 1) for a, b in re.findall(r"(\d+) to (\d+)", numbers)]
        alone = re.sub(r"\d+ to \d+", "", numbers)
        said.setdefault(tag, set()).update({n for s in spans for n in s} | {int(n) for n in re.findall(r"\d+", alone)})
    tagged: dict[str, set[int]] = {}
    for lv in load_levels():
        tagged.setdefault(lv.difficulty, set()).add(lv.number)
    assert said == tagged
