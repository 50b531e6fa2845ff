"""A graded lesson answer's first attempt, recorded in the output that shows the key and read back by autograde.

The gaming attempt this closes (answer wrong, read the key, change the letter,
submit) is run end to end through ``nbgrader autograde`` in
tests/notebooks/test_check_yourself.py; here: the record's shape, that the
lesson's check writes it only once the key shows, and that a malformed or
foreign record counts against the learner (fail closed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.lessons.first_answer import FIRST_ANSWER_MIME, first_answer_record, read_first_answer

nbformat = pytest.importorskip("nbformat", reason="the notebook stack is in the 'lab' extra")
pytest.importorskip("ipywidgets", reason="ipywidgets is in the 'lab' extra")

from grader.grading.autograde import first_answers, grade_answers  # noqa: E402 - needs nbformat
from grader.lessons.quiz_widgets import graded  # noqa: E402 - needs ipywidgets

Q = "check-etc-secrets-github"


@pytest.fixture(autouse=True)
def _progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


def _out(record: Any) -> list[dict[str, Any]]:
    return [{"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": "x", FIRST_ANSWER_MIME: record}}]


def test_the_record_reads_back_as_written() -> None:
    assert read_first_answer(_out(first_answer_record(Q, True)), Q) == (True, True)
    assert read_first_answer(_out(first_answer_record(Q, False)), Q) == (True, False)
    assert read_first_answer([{"output_type": "stream", "text": "hi"}], Q) == (False, None)
    assert read_first_answer(None, Q) == (False, None)


@pytest.mark.parametrize("record", [
    {"question": Q, "first_solved": "true"},               # not a bool
    {"question": Q, "first_solved": 1},                    # not a bool either
    {"question": "check-standard-docker", "first_solved": True},  # another question's record under this call
    {"question": Q, "first_solved": True, "extra": 1},     # an unknown key
    {"question": Q},                                       # a missing key
    ["not", "a", "record"],
])
def test_a_malformed_or_foreign_record_counts_as_a_wrong_first_attempt(record: Any) -> None:
    assert read_first_answer(_out(record), Q) == (True, False)


def test_two_records_count_as_right_only_if_both_say_so() -> None:
    both = _out(first_answer_record(Q, True)) + _out(first_answer_record(Q, False))
    assert read_first_answer(both, Q) == (True, False)


def _bundle(widget: Any) -> dict[str, Any]:
    data = widget._repr_mimebundle_()
    assert isinstance(data, dict)
    return data


def test_the_check_records_the_first_attempt_once_the_key_shows_and_keeps_it_after_a_changed_letter() -> None:
    assert FIRST_ANSWER_MIME not in _bundle(graded(Q, ""))  # nothing answered: no key shown, no record
    first = _bundle(graded(Q, "a"))
    assert "Model answer" in first["text/html"] and first[FIRST_ANSWER_MIME] == {"question": Q, "first_solved": False}
    changed = _bundle(graded(Q, "c"))  # the key seen, the letter changed: the record still says the first was wrong
    assert "Right" in changed["text/html"] and changed[FIRST_ANSWER_MIME] == {"question": Q, "first_solved": False}
    assert "Your first answer is the one graded" in changed["text/html"]


def test_without_a_saved_attempt_no_key_shows_and_nothing_is_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(blocker / "progress.json"))
    data = _bundle(graded(Q, "a"))
    assert "Model answer" not in data["text/html"] and FIRST_ANSWER_MIME not in data


def _notebook(letter: str, outputs: list[dict[str, Any]]) -> Any:
    answers = nbformat.v4.new_code_cell(f'answer_etc_secrets = "{letter}"')
    answers.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "l05-answers"}
    check = nbformat.v4.new_code_cell(f'is_option("{Q}", answer_etc_secrets)\ngraded("{Q}", answer_etc_secrets)')
    check.metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "l05-check", "points": 1}
    check.outputs = [nbformat.from_dict(o) for o in outputs]
    return nbformat.v4.new_notebook(cells=[answers, check])


def test_autograde_scores_a_letter_changed_after_a_wrong_first_attempt_0_and_says_why() -> None:
    nb = _notebook("c", _out(first_answer_record(Q, False)))  # right now, wrong first
    first = first_answers(nb)
    assert first == {"l05-check": False}
    assert grade_answers(nb, first) == {"l05-check": False}
    assert "first answer was not the right option" in nb.cells[1].outputs[0]["evalue"]


def test_autograde_scores_the_letter_after_a_right_first_attempt_or_without_a_record() -> None:
    for outputs in (_out(first_answer_record(Q, True)), []):
        nb = _notebook("c", outputs)
        assert grade_answers(nb, first_answers(nb)) == {"l05-check": True}
    nb = _notebook("a", _out(first_answer_record(Q, True)))  # right first, then changed to a wrong letter: the letter
    assert grade_answers(nb, first_answers(nb)) == {"l05-check": False}
