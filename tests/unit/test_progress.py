"""The learner's progress file: round trip, first completion kept, corrupt files reported and left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.progress import ProgressError, load_progress, mark_done, progress_path, reset_progress


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


def test_progress_round_trip(_progress_file: Path) -> None:
    assert progress_path() == _progress_file
    assert load_progress().done == {}
    mark_done("l01-why-sandbox", now=100.0)
    mark_done("task:scope-secure-sandbox", now=200.0)
    mark_done("l01-why-sandbox", now=300.0)  # the first completion is kept
    again = load_progress()
    assert again.done == {"l01-why-sandbox": 100.0, "task:scope-secure-sandbox": 200.0}
    assert json.loads(_progress_file.read_text())["version"] == 1
    reset_progress()
    assert load_progress().done == {}


def test_corrupt_progress_file_is_reported_not_overwritten(_progress_file: Path) -> None:
    _progress_file.write_text("{not json")
    with pytest.raises(ProgressError, match="not valid JSON"):
        mark_done("l01-why-sandbox")
    assert _progress_file.read_text() == "{not json"


def test_mark_done_rejects_empty_ids() -> None:
    with pytest.raises(ValueError):
        mark_done("  ")
