"""Lesson length and rhythm: no lesson longer than ``MAX_CELLS`` cells; each hands-on lesson opens with its goal and ends with a check.

The cap applies to every lesson source (``lessons/0*/*.md``), whoever writes it;
it is one constant, so a lesson that needs more says so here, in review. A
lesson whose editor checks a goal (``PolicyEditor(..., goal=...)``) must state
that goal in its opening cell, and the goal must be one of ``grader.course.goals``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the 'lab' extra")

from grader.course.goals import GOALS  # noqa: E402 - after the skip

ROOT = Path(__file__).resolve().parents[3]
SOURCES = sorted((ROOT / "lessons").glob("0*/*.md"))
MAX_CELLS = 21  # about an hour's attention at most: past this, split the lesson (21: lesson 06 opens with a retrieval question)
# The lessons allowed more, each with its reason. Lesson 07 is a ladder: one %%attack cell for each of its eleven
# levels, so that no attack replaces another (levels 4 to 7 once shared one cell), is eleven cells before any prose,
# and the capstone's policy editor is one more.
LONGER = {"07-break-it-yourself": 24}
GOAL_CALL = re.compile(r'PolicyEditor\([^)]*goal="([a-z0-9-]+)"')


def _cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in jupytext.read(path).cells]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.parent.name)
def test_no_lesson_is_longer_than_the_cap(path: Path) -> None:
    n, cap = len(_cells(path)), LONGER.get(path.parent.name, MAX_CELLS)
    assert n <= cap, f"{path.relative_to(ROOT)} has {n} cells; the cap is {cap} (tests/unit/project/test_lesson_rhythm.py): split it"


GOAL_LESSONS = [p for p in SOURCES if GOAL_CALL.search(p.read_text(encoding="utf-8"))]


def test_the_hands_on_lessons_are_found() -> None:
    names = {p.parent.name for p in GOAL_LESSONS}
    assert {"02-naive-vs-secure", "03-container-alone", "04-trusted-domains"} <= names


@pytest.mark.parametrize("path", GOAL_LESSONS, ids=lambda p: p.parent.name)
def test_a_hands_on_lesson_opens_with_its_goal_and_ends_with_its_check(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    ids = GOAL_CALL.findall(text)
    assert all(i in GOALS for i in ids), f"unknown goal in {path.name}: {ids}; known: {list(GOALS)}"
    cells = _cells(path)
    kind, opening = cells[0]
    assert kind == "markdown" and "goal" in opening.lower(), f"{path.name} must open with its goal"
    code = [src for k, src in cells if k == "code"]
    editor_at = max(i for i, src in enumerate(code) if GOAL_CALL.search(src))
    after = code[editor_at + 1:]
    assert after and "finish_lesson(" in after[-1], f"{path.name}: the goal's editor comes near the end, before finish_lesson"
    assert len(after) <= 4, f"{path.name}: the editor is the lesson's last hands-on cell (only questions follow it)"


def test_the_cap_can_fail(tmp_path: Path) -> None:
    long = tmp_path / "long.md"
    long.write_text("\n\n".join(f"```{{code-cell}}\nx = {i}\n```" for i in range(MAX_CELLS + 1)) + "\n", encoding="utf-8")
    assert len(_cells(long)) > MAX_CELLS
