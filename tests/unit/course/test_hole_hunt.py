"""hole_hunt.py: lesson 06's exercise shown, judged and recorded once (first attempt only, never the answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.course.hole_hunt import check_hole, item_id, settings_of, show_settings
from grader.course.progress import load_progress
from grader.realtools.hatches import exercise


@pytest.fixture(autouse=True)
def _own_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


def test_the_exercise_reads_as_its_story_and_its_file() -> None:
    text = show_settings("git-excluded")
    assert exercise("git-excluded").story in text and '"excludedCommands"' in text
    copy = settings_of("git-excluded")
    copy["sandbox"]["excludedCommands"] = []
    assert exercise("git-excluded").settings["sandbox"]["excludedCommands"] == ["git"]  # a copy: the exercise stays


def test_an_unanswered_cell_records_nothing_and_raises_nothing() -> None:
    out = check_hole("git-excluded", [], settings_of("git-excluded"))
    assert "Not answered yet" in str(out)
    assert load_progress().first_attempt(item_id("git-excluded")) is None


def test_only_the_first_attempt_is_recorded_and_no_answer_is_kept(_own_progress: Path) -> None:
    wrong = check_hole("git-excluded", ["autoAllowBashIfSandboxed"], settings_of("git-excluded"))
    assert not wrong.verdict.passed
    fixed = settings_of("git-excluded")
    fixed["sandbox"]["excludedCommands"] = []
    right = check_hole("git-excluded", ["excludedCommands"], fixed)
    assert right.verdict.passed and str(right).startswith("Right")
    first = load_progress().first_attempt(item_id("git-excluded"))
    assert first is not None and first.result == "wrong" and first.score == 0.0
    assert "autoAllow" not in _own_progress.read_text() and "excludedCommands" not in _own_progress.read_text()


def test_an_unreadable_record_is_said_not_hidden(_own_progress: Path) -> None:
    _own_progress.write_text("not json")
    out = check_hole("git-excluded", ["excludedCommands"], json.dumps(exercise("git-excluded").settings))
    assert out.unsaved and "Not recorded" in str(out)
