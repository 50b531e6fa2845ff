"""Lesson 06's "find the hole in this settings.json": an exercise shown, a learner's answer judged and recorded.

The judging is ``realtools.hatches.judge`` (the reference facts about Claude
Code's escape hatches); this module only shows an exercise as a learner reads
it and records the first attempt on the progress board (``hatch:<exercise
id>``, result and score only, never the answer). An unanswered cell is "not
answered yet": nothing raises, so Run All never stops here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Union

from grader.course.progress import ProgressError, record_attempt
from grader.realtools.hatches import HoleVerdict, exercise, judge

__all__ = ["HoleCheck", "check_hole", "item_id", "settings_of", "show_settings"]


def item_id(exercise_id: str) -> str:
    """The progress board's id of an exercise."""
    return f"hatch:{exercise_id}"


def show_settings(exercise_id: str) -> str:
    """The exercise as the learner reads it: its story, then the settings.json."""
    ex = exercise(exercise_id)
    return f"{ex.story}\n\nsettings.json:\n{ex.text()}"


def settings_of(exercise_id: str) -> dict[str, Any]:
    """A copy of the exercise's settings for the learner to fix (changing it changes nothing else)."""
    copy: dict[str, Any] = json.loads(exercise(exercise_id).text())
    return copy


@dataclass(frozen=True)
class HoleCheck:
    """A judged answer, and why it could not be recorded ("" when it was, or when there was nothing to record)."""

    verdict: HoleVerdict
    unsaved: str = ""

    def __str__(self) -> str:
        note = f"\n(Not recorded on the progress board: {self.unsaved})" if self.unsaved else ""
        return self.verdict.text() + note


def check_hole(exercise_id: str, keys: Iterable[str], fixed: Union[Mapping[str, Any], str, None], *,
               record: bool = True) -> HoleCheck:
    """Judge an answer (the keys that make the file unsafe, the file fixed) and record it if it is the first."""
    verdict = judge(exercise_id, keys, fixed)
    if not (record and verdict.answered):
        return HoleCheck(verdict)
    try:
        record_attempt(item_id(exercise_id), verdict.result, verdict.score)
    except (OSError, ProgressError) as exc:
        return HoleCheck(verdict, str(exc))
    return HoleCheck(verdict)
