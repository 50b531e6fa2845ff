"""The number of capture-the-flag levels the course text states is the number of levels in ``grader/levels/``.

Lesson 00 once said "the same eight levels" while the ladder had eleven: a count written in prose does not
follow the level files, so this test reads every count of the ladder the lessons, the README and the route state.
"""

from __future__ import annotations

import re
from pathlib import Path

from grader.course.ladder import load_levels

ROOT = Path(__file__).resolve().parents[3]
TEXTS = [*sorted((ROOT / "lessons").glob("*/*.md")), ROOT / "README.md", ROOT / "grader" / "route.json"]
# How the course names the whole ladder: "a ladder of eleven levels", "the same ladder of eleven levels",
# "capture flags from eleven sandboxes". Other counts ("two sandboxes" side by side, "3 levels" of nesting) are not it.
LADDER_COUNT = re.compile(r"\b(?:ladder of|flags from|the same) (\w+) (?:levels|sandboxes)\b")
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]


def _number(word: str) -> int:
    return int(word) if word.isdigit() else WORDS.index(word.lower())


def test_every_count_of_the_ladder_in_the_text_is_the_number_of_levels() -> None:
    levels = len(load_levels())
    found = [(path.relative_to(ROOT).as_posix(), m.group(0)) for path in TEXTS
             for m in LADDER_COUNT.finditer(path.read_text(encoding="utf-8"))]
    # the lessons, the README and the route each name the ladder's size: a pattern that matched nothing would pass vacuously
    assert {where.split("/")[0] for where, _ in found} >= {"lessons", "README.md", "grader"}, found
    wrong = [(where, said) for where, said in found if _number(LADDER_COUNT.match(said).group(1)) != levels]  # type: ignore[union-attr]
    assert wrong == [], f"the ladder has {levels} levels (grader/levels/); the text says otherwise: {wrong}"


def test_a_count_in_words_is_read_as_its_number() -> None:
    assert [_number(w) for w in ("eight", "Eleven", "11")] == [8, 11, 11]
