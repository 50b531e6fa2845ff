"""The lessons' widgets: the policy editor, the probe board, side-by-side runs, the quiz and the progress board.

What they draw is tested in test_board.py; here, that they wire validation,
runs, grading and progress to that HTML.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.backends import StaticBackend
from grader.progress import load_progress, mark_done
from grader.wording import backend_phrase

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
PRACTICE = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


widgets = pytest.importorskip("grader.widgets", reason="ipywidgets is in the 'lab' extra")


def test_policy_editor_lists_errors_with_pointers_and_disables_the_button() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend())
    assert editor.policy is not None and not editor.button.disabled
    assert "/network/allowedDomains/0" in editor.status.value  # the *.github.com lint warning
    editor.policy_text = json.dumps({"filesystem": {"allowWrites": ["/x"]}, "network": {"allowedDomains": ["*"]}})
    assert editor.policy is None and editor.button.disabled
    pointers = [p.pointer for p in editor.errors]
    assert pointers == ["/filesystem/allowWrites", "/network/allowedDomains/0"]
    assert 'data-pointer="/filesystem/allowWrites"' in editor.status.value
    assert "allowWrite" in editor.status.value  # the did-you-mean
    assert editor.probe() is None


def test_policy_editor_never_reads_a_file_named_in_the_text(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(PRACTICE))
    editor = widgets.PolicyEditor(str(f), backend=StaticBackend())
    assert editor.policy is None and editor.errors


def test_policy_editor_probe_fills_the_board_and_says_which_backend_ran() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend(notice="predicted, not run: no Docker engine answers (test)"))
    result = editor.probe()
    assert result is not None and result.outcome("exfil-secret").outcome == "succeeded"
    assert 'data-probe="exfil-secret" data-outcome="succeeded"' in editor.board.value
    assert "predicted: no Docker engine" in editor.backend_note.value
    assert backend_phrase("static", result.notes) in editor.backend_note.value
    assert "sl-probe-button" in editor.button._dom_classes and "sl-policy-text" in editor.text._dom_classes
    assert "sl-probe-board" in editor.board._dom_classes
    assert "text/html" in editor._repr_mimebundle_()


def test_side_by_side_runs_each_policy_including_the_baseline() -> None:
    view = widgets.side_by_side({"naive": NAIVE, "practice": PRACTICE, "baseline": None}, backend=StaticBackend())
    assert set(view.results) == {"naive", "practice", "baseline"}
    assert view.results["baseline"].sandbox == "baseline"
    assert 'data-sandbox="practice" data-probe="exfil-secret" data-outcome="blocked"' in view.value


def test_side_by_side_shows_an_invalid_policy_as_a_message() -> None:
    view = widgets.side_by_side({"bad": {"network": {"allowedDomains": ["*"]}}}, backend=StaticBackend())
    assert isinstance(view.results["bad"], str) and "/network/allowedDomains/0" in view.results["bad"]


def test_quiz_widget_reveals_feedback_and_records_progress() -> None:
    quiz = widgets.Quiz("check-standard-docker")
    assert quiz.feedback.value == ""
    correct, _ = quiz.check("b")
    assert correct and "bridge networking" in quiz.feedback.value
    assert load_progress().is_done("quiz:check-standard-docker")


def test_progress_board_lists_lessons_questions_and_tasks() -> None:
    mark_done("l02-naive-vs-secure")
    out = widgets.ProgressBoard().html.value
    assert 'data-item="l02-naive-vs-secure" data-done="true"' in out
    assert 'data-item="quiz:recall-two-axes" data-done="false"' in out
