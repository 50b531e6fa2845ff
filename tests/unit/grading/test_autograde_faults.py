"""A submission the grader could not grade scores 0 on every rubric cell with the reason, in nbgrader's autograde
(``grader/grading/autograde.py``, ``GradePolicies``): never a notebook that fails and leaves a partial score."""

from __future__ import annotations

import threading
from pathlib import Path

import nbformat
import pytest

from grader.grading import autograde
from grader.grading.autograde import GradePolicies, PolicySource, Reading
from grader.grading.batch import Row, Submission
from grader.grading.tasks import load_task

TASK = load_task("scope-secure-sandbox")
RESOURCES = {"nbgrader": {"student": "zoe", "assignment": "a1", "notebook": "task", "db_url": ""}}


def _notebook() -> nbformat.NotebookNode:
    cells = []
    for check in TASK.checks:
        cell = nbformat.v4.new_code_cell(f"assert_check({check.id!r})")
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": TASK.grade_id(check.id), "points": check.points}
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="passed (the learner's kernel says so)\n")]
        cells.append(cell)
    quiz = nbformat.v4.new_code_cell("assert True  # a cell no judge here scores")
    quiz.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "extra", "points": 3}
    cells.append(quiz)
    return nbformat.v4.new_notebook(cells=cells)


@pytest.mark.parametrize("feedback", [
    "scope-secure-sandbox: not graded: the grader failed (BackendError: the engine went away); rerun the batch to retry",
    "scope-secure-sandbox: not graded: the grader failed (TypeError: x) on /a\ud800; rerunning will fail the same way",
])
def test_a_submission_the_grader_failed_on_scores_zero_everywhere_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, feedback: str
) -> None:
    found = PolicySource('{"filesystem": {}}', "policy cell")
    sub = Submission("zoe", found.origin, found.text.encode("utf-8") if found.text else None)
    key = (TASK.id, "zoe", sub.sha256)
    done = threading.Event()
    done.set()
    monkeypatch.setitem(autograde._ready, key, done)
    monkeypatch.setitem(autograde._rows, key, Row("zoe", 0, TASK.max_score, "error", feedback, sub.source, sub.sha256))
    monkeypatch.setitem(autograde._readings, ("a1", "zoe", "task"), Reading(TASK, (), found))
    nb, _ = GradePolicies().preprocess(_notebook(), RESOURCES)
    for cell in nb.cells:
        [out] = cell.outputs
        assert out["output_type"] == "error", cell  # nbgrader scores an error output 0
        assert "0 points: Sandbox Lab could not grade this submission" in out["evalue"] and "the grader failed" in out["evalue"]
        out["evalue"].encode("utf-8")  # the notebook can be written
    assert nb.metadata["sandbox_lab"]["structure"]["checked"] is False
    nbformat.writes(nb).encode("utf-8")


def test_the_submitted_file_is_judged_by_its_cause_never_by_the_words_of_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An absent file is no answer whatever its text says; a refused one is said, even if its text starts with "no "."""
    from grader.grading.submission import SubmittedFile

    nb = nbformat.v4.new_notebook(cells=[])
    monkeypatch.setattr(autograde, "read_submitted", lambda folder, name: SubmittedFile(None, "absent", "Nothing was handed in"))
    assert autograde.policy_source(nb, TASK, tmp_path) == PolicySource(None, autograde.NOT_A_LITERAL)
    monkeypatch.setattr(autograde, "read_submitted", lambda folder, name: SubmittedFile(None, "refused", "no link is followed"))
    got = autograde.policy_source(nb, TASK, tmp_path)
    assert got.text is None and got.origin.startswith("no link is followed. "), got
